"""`tj.explain`: what the compiler does with a function, printed.

    ex = tj.explain(loss)(w, x, y)     # the gradient program of loss w.r.t. argument 0
    print(ex)                          # every stage below, as text
    ex.tapes["traced"], ex.tapes["autodiff"], ex.tapes["cse"], ex.tape   # Tape per stage
    ex.groups                          # codegen/schedule.py's steps: Loop and Call
    ex.source, ex.sizes                # the numba module and the size table `S` it is called with

Stages, in pipeline order: "traced" (the primal tape, as `tj.make_tape` shows it), "rerolled"
(its plain Python loops as scans; only when one was re-rolled), "autodiff"
(the joint tape; absent with grad=False), then one tape after each pass of `passes.PIPELINE`,
named by the pass, then "fuse" (the tape grouped into loop nests: not for backend="interpret",
which runs the tape before it); then the fusion groups and the generated source of the last.

This module is a consumer, not a second pipeline: the program is built by the one builder
every transform uses (transforms/builder.py), which reports each stage, and shown as an
`Explanation` (program_text.py); the tape transform's stage is named by its record ("autodiff",
"jacobian", "jvp", "batched"). It never compiles: the source is shown, not loaded. In the
layers: above the transforms (it reads a transform's own record, settings and counts).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from .api import JIT, VALUE_AND_GRAD
from .transforms.arguments import check_argnums, fn_name
from .backends import BACKENDS
from .errors import ArgumentError, at_source, user_source
from .ir import Tape
from .passes import fused
from .jacobians import JVP
from .transforms.traced import collecting_rerolls
from .pytree import TreeDef
from .split import LINEARIZE, VJP
from .transforms.cached import CachedTransform

if TYPE_CHECKING:
    from .program_text import Explanation


def explain(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *, grad: bool = True,
            has_aux: bool = False, static_argnums: int | Sequence[int] = (),
            backend: str = "numba", transform: str | None = None) -> Callable[..., Explanation]:
    """`explain(f)(*args)`: the stages of the program `value_and_grad(f, argnums)` runs on
    `args` (with grad=False: of `f` itself). Nothing is compiled or run.

    `fn` may also be any transform (`tj.grad(f)`, `tj.jit(f)`, `tj.vmap(f)`, `tj.jacfwd(f)`,
    `tj.hessian(f)`, ...): the program it runs on `args` is shown, with its own settings and
    its `cache_info()` (counts, and why its last call missed the cache). `transform="jvp"`,
    `"vjp"` or `"linearize"` shows those transforms' program of `f`, called as they are:
    `explain(f, transform="jvp")(primals, tangents)`, `explain(f, transform="vjp")(*primals)`.
    backend="interpret" shows the tapes only: that backend has no fusion or generated code.
    """
    if backend not in BACKENDS:
        raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                      f"{', '.join(BACKENDS)}", user_source()))
    given = getattr(fn, "__wrapped_transform__", fn)
    if not isinstance(given, CachedTransform) or transform is not None:
        given = None
    if transform is not None and transform not in _BY_NAME:
        raise ArgumentError(at_source(
            f"explain: transform={transform!r}; choose one of {', '.join(_BY_NAME)} (other "
            f"transforms: explain the transform itself, e.g. tj.explain(tj.vmap(f)))",
            user_source()))
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def explained(*args: Any, **kwargs: Any) -> Explanation:
        t = given or _transform_of(
            fn, argnums if grad else None, has_aux, static, transform, args)
        if transform == "jvp":
            args = (*args[0], *args[1])
        tapes: dict[str, Tape] = {}
        with collecting_rerolls() as loops:
            key, program = t.program(args, kwargs, tapes.__setitem__)
        if backend != "interpret":
            tapes["fuse"] = fused(program.tape)
        notes = [f"re-rolled into a scan: the Python {loop}" for loop in loops]
        if program.second is not None:
            notes.append(f"{t.transform}'s second program, run on the residuals: "
                         f"{len(program.second.eqns)} eqns")
        if given is not None:
            notes.append("cache of the transform: " + ", ".join(
                f"{k}={v}" for k, v in t.cache_info().items()))
        from .program_text import build     # (with code generation's schedule: 2 ms)
        return build(f"{fn_name(t.fn)}, {_what(t, key)}, backend {backend}", tapes, backend,
                     notes)

    return explained


def _transform_of(fn: Callable[..., Any], argnums: int | Sequence[int] | None, has_aux: bool,
                  static: tuple[int, ...], transform: str | None, args: tuple
                  ) -> CachedTransform:
    """The transform whose program explain shows for a plain function."""
    if transform == "jvp":
        return CachedTransform(_BY_NAME["jvp"], fn, (), n=len(args[0]))
    if transform is not None:
        return CachedTransform(_BY_NAME[transform], fn, (), has_aux=has_aux)
    if argnums is None:
        return CachedTransform(_FORWARD, fn, static)
    return CachedTransform(_GRADIENT, fn, static, None, "explain",
                           argnums=check_argnums(argnums, "explain"), has_aux=has_aux,
                           grad_only=False, check_output=_require_scalar_float)


def _what(t: CachedTransform, key: Any) -> str:
    """What the program is, for the title."""
    if t.record.name in ("grad", "value_and_grad"):
        return f"gradient program w.r.t. argument(s) {', '.join(map(str, key.options))}"
    if t.record.name == "jit":
        return "forward program"
    return f"{t.record.name} program"


_GRADIENT = VALUE_AND_GRAD._replace(shared=False)
_FORWARD = JIT._replace(shared=False)
_BY_NAME = {"jvp": JVP, "vjp": VJP, "linearize": LINEARIZE}


def _require_scalar_float(fn: Callable[..., Any], tape: Tape, out_td: TreeDef) -> None:
    """explain's `OutputCheck` (transforms/traced.py), the gradient record's `check_output`: its
    message points to grad=False."""
    n_out = out_td.num_leaves
    out = tape.outvars[0] if n_out == 1 else None
    if out is None or out.aval.shape != () or not out.aval.is_float:
        shown = out.aval if out is not None else f"{n_out} outputs"
        raise ArgumentError(at_source(
            f"explain shows the gradient program, which needs a scalar float output, but "
            f"{fn_name(fn)} returned {shown}; pass grad=False to see the forward program",
            user_source()))
