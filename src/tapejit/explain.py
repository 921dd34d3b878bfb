"""What the compiler does with a function, printed: `tj.explain` and `TAPEJIT_DUMP`.

    ex = tj.explain(loss)(w, x, y)     # the gradient program of loss w.r.t. argument 0
    print(ex)                          # every stage below, as text
    ex.tapes["traced"], ex.tapes["autodiff"], ex.tapes["cse"], ex.tape   # Tape per stage
    ex.groups                          # codegen/schedule.py's steps: Loop and Call
    ex.source, ex.sizes                # the numba module and the size table `S` it is called with

Stages, in pipeline order: "traced" (the primal tape, as `tj.make_tape` shows it), "autodiff"
(the joint tape; absent with grad=False), then one tape after each pass of `passes.PIPELINE`,
named by the pass; then the fusion groups and the generated source of the last tape.

This module is a consumer, not a second pipeline: it calls the functions the transforms call
(api.split_args/trace_flat, autodiff.vjp_tape, passes.optimize with `after_each`,
codegen steps/generate). It never compiles: the source is shown, not loaded.

`TAPEJIT_DUMP=dir` (config.py): compile.py calls `dump(compiled)` for every program the numba
backend builds, which writes the same text for the compiled (optimized) tape to
`dir/tj_<program hash>.txt`, the hash naming the module `tj_<hash>.py` in the cache.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import autodiff
from .api import _check_float_inputs, _fn_name, _normalize_argnums, split_args, trace_flat
from .cache import program_hash
from .codegen.cpu import generate
from .codegen.schedule import Call, Loop, Step, steps
from .compile import BACKENDS
from .config import config
from .dims import Dim, Dims
from .dispatch import CachedTransform
from .errors import ArgumentError, at_source
from .ir import Tape
from .passes import PIPELINE, optimize
from .printer import print_eqn, print_tape
from .trace import user_source

if TYPE_CHECKING:
    from .compile import Compiled


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The stages of one program. `str()` (and IPython's display) is `text`."""

    title: str
    tapes: dict[str, Tape]      # stage name -> tape, in pipeline order; the last is compiled
    groups: list[Step]          # the fusion groups of the last tape
    source: str                 # generated numba module ("" for the interpret backend)
    sizes: np.ndarray           # the size table `S` the entry function is called with
    notes: tuple[str, ...] = ()  # extra lines under the title (cache counts, ...)

    @property
    def tape(self) -> Tape:
        """The tape that is compiled: the one after the last pass."""
        return list(self.tapes.values())[-1]

    @property
    def module(self) -> str:
        """The file name of the generated module in the cache directory."""
        return f"tj_{program_hash(self.source)}.py" if self.source else ""

    @property
    def text(self) -> str:
        return render(self)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return (f"<Explanation of {self.title}: {len(self.tapes)} tapes, {len(self.groups)} "
                f"groups, {len(self.source.splitlines())} source lines>")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)


def explain(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *, grad: bool = True,
            has_aux: bool = False, static_argnums: int | Sequence[int] = (),
            backend: str = "numba") -> Callable[..., Explanation]:
    """`explain(f)(*args)`: the stages of the program `value_and_grad(f, argnums)` runs on
    `args` (with grad=False: of `f` itself). Nothing is compiled or run.

    `fn` may also be a transform (`tj.grad(f)`, `tj.value_and_grad(f)`): its own argnums,
    has_aux and static_argnums are used, and its `cache_info()` (counts, and why its last call
    missed the cache) is shown. backend="interpret" shows the tapes only: that backend has no
    fusion or generated code.
    """
    if backend not in BACKENDS:
        raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                      f"{', '.join(BACKENDS)}", user_source(1)))
    fn, nums_given, has_aux, static, transform = _settings(fn, argnums if grad else None,
                                                           has_aux, static_argnums)

    def explained(*args: Any, **kwargs: Any) -> Explanation:
        call, _ = split_args(fn, args, kwargs, static)
        tape, out_td, _ = trace_flat(fn, call, has_aux)
        tapes = {"traced": tape}
        what = "forward program"
        if nums_given is not None:
            nums = _normalize_argnums(nums_given, call.n_pos)
            wrt = [j for i in nums for j in call.leaf_range(i)]
            _check_float_inputs("explain", call, wrt)
            _check_scalar(tape, out_td.num_leaves, fn)
            seeds = [autodiff.ONE] + [None] * (len(tape.outvars) - 1)
            tapes["autodiff"] = tape = autodiff.vjp_tape(tape, wrt, seeds)
            what = f"gradient program w.r.t. argument(s) {', '.join(map(str, nums))}"
        optimize(tape, after_each=tapes.__setitem__)
        notes = [] if transform is None else ["cache of the transform: " + ", ".join(
            f"{k}={v}" for k, v in transform.cache_info().items())]
        return build(f"{_fn_name(fn)}, {what}, backend {backend}", tapes, backend, notes)

    return explained


def _settings(fn: Callable[..., Any], argnums: int | Sequence[int] | None, has_aux: bool,
              static_argnums: int | Sequence[int]) -> tuple:
    """(function, argnums or None for the forward program, has_aux, static argnums as a tuple,
    the transform or None): a transform's own settings replace the arguments."""
    transform = getattr(fn, "__wrapped_transform__", fn)
    if isinstance(transform, CachedTransform):
        fn, static_argnums = transform.fn, transform.static_argnums
        argnums = getattr(transform, "argnums", None)
        has_aux = getattr(transform, "has_aux", False)
    else:
        transform = None
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    return fn, argnums, has_aux, static, transform


def _check_scalar(tape: Tape, n_out: int, fn: Callable[..., Any]) -> None:
    out = tape.outvars[0] if n_out == 1 else None
    if out is None or out.aval.shape != () or not out.aval.is_float:
        shown = out.aval if out is not None else f"{n_out} outputs"
        raise ArgumentError(at_source(
            f"explain shows the gradient program, which needs a scalar float output, but "
            f"{_fn_name(fn)} returned {shown}; pass grad=False to see the forward program",
            user_source(2)))


def build(title: str, tapes: dict[str, Tape], backend: str = "numba",
          notes: Sequence[str] = (), source: tuple[str, np.ndarray] | None = None,
          ) -> Explanation:
    """An Explanation of the last of `tapes`; `source` (and sizes) when already generated."""
    final = list(tapes.values())[-1]
    groups = steps(final, Dims(final).scope(final))
    if backend != "numba":
        return Explanation(title, tapes, groups, "", np.zeros(0, np.int64), tuple(notes))
    text, sizes = source if source is not None else generate(final)[:2]
    return Explanation(title, tapes, groups, text, sizes, tuple(notes))


_STAGE_NOTES = {"traced": "traced: the primal tape",
                "autodiff": "autodiff: the joint tape (forward sweep, then reverse sweep)",
                **{name: f"after {name}: {doc}" for name, _, doc in PIPELINE}}


def render(ex: Explanation) -> str:
    """The text of an explanation: one `== section ==` per stage."""
    out = [f"tj.explain: {ex.title}", *ex.notes, ""]
    previous = None
    for name, tape in ex.tapes.items():
        head = f"== {_STAGE_NOTES.get(name, name)} ({len(tape.eqns)} eqns)"
        if tape == previous:
            out += [head + ": unchanged ==", ""]
        else:
            out += [head + " ==", print_tape(tape), ""]
        previous = tape
    loops = sum(isinstance(s, Loop) for s in ex.groups)
    out.append(f"== fusion groups: {loops} loops, {len(ex.groups) - loops} calls ==")
    out += [*render_groups(ex.groups), ""]
    if not ex.source:
        out.append("(the interpret backend runs the last tape on numpy: no generated code)")
        return "\n".join(out)
    sizes = ", ".join(f"S[{k}]={int(n)}" for k, n in enumerate(ex.sizes))
    out += [f"== generated source: module {ex.module}; sizes {sizes or '(none)'} ==",
            ex.source.rstrip("\n")]
    return "\n".join(out)


def render_groups(groups: Sequence[Step]) -> list[str]:
    """One header per step (a Loop's domain and what it accumulates, or a Call), then its eqns;
    eqns of a Loop's inner stages (extra inner axes, run inside each iteration of the nest) are
    indented under a `stage over <domain>` line."""
    lines = []
    for number, step in enumerate(groups):
        if isinstance(step, Call):
            lines += [f"step {number}: Call", "    " + print_eqn(step.eqn)]
            continue
        acc = f", accumulates {', '.join(sorted(step.reductions))}" if step.reductions else ""
        lines.append(f"step {number}: Loop over {_dims(step.domain)} ({len(step.eqns)} eqns{acc})")
        shown = None
        for eqn in step.eqns:
            stage = step.stages[step.stage_of[eqn.outs[0].name]] if step.stages else step.domain
            if stage != step.domain and stage != shown:
                lines.append(f"    stage over {_dims(stage)}")
            shown = stage
            lines.append(("      " if stage != step.domain else "    ") + print_eqn(eqn))
    return lines


def _dims(domain: tuple[Dim, ...]) -> str:
    return "x".join(str(d.size) for d in domain) or "scalar"


def dump(compiled: "Compiled") -> None:
    """With TAPEJIT_DUMP set, write the explanation of a compiled program to its directory.
    A dump that cannot be written warns: it must never break the program."""
    folder = config().dump_dir
    if folder is None:
        return
    name = compiled.program.path.stem
    ex = build(f"program {name}", {"compiled: the optimized tape": compiled.tape}, "numba",
               source=(compiled.source, compiled.sizes))
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(ex.text + "\n")
        os.replace(tmp, folder / f"{name}.txt")  # atomic: threads may dump the same program
        tmp = None
    except OSError as err:
        warnings.warn(f"TAPEJIT_DUMP: cannot write {folder / name}.txt: {err}", stacklevel=2)
    finally:
        if tmp is not None:
            os.unlink(tmp)
