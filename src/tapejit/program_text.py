"""An Explanation: one program's stages as text (tapes, fusion groups, generated source), and
`TAPEJIT_DUMP`, which writes one for every program a backend compiles.

Below compile.py and cuda_support.py, which call `dump` for each program they build; above
the passes and code generation it shows (it calls `codegen.cpu.generate`, never compiles).
explain.py, above the transforms, builds an Explanation of a program before it is compiled.

`TAPEJIT_DUMP=dir` (config.py): `dump` writes the text for the compiled (fused) tape to
`dir/tj_<program hash>.txt`, the hash naming the module `tj_<hash>.py` in the cache.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import warnings
from typing import Any, Sequence

import numpy as np

from .codegen.schedule import Call, Loop, Step, steps
from .config import config
from .dims import Dim, Dims
from .disk.store import program_hash
from .ir import Tape, print_eqn, print_tape
from .passes import FUSION, PIPELINE, fused


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The stages of one program. `str()` (and IPython's display) is `text`."""

    title: str
    tapes: dict[str, Tape]      # stage name -> tape, in pipeline order; the last is run
    groups: list[Step]          # the fusion groups of the last tape
    source: str                 # generated numba module ("" for the interpret backend)
    sizes: np.ndarray           # the size table `S` the entry function is called with
    notes: tuple[str, ...] = ()  # extra lines under the title (cache counts, ...)

    @property
    def tape(self) -> Tape:
        """The tape the backend runs: after fusion (the interpret backend's: after the last
        pass)."""
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


def build(title: str, tapes: dict[str, Tape], backend: str = "numba",
          notes: Sequence[str] = (), source: tuple[str, np.ndarray] | None = None,
          ) -> Explanation:
    """An Explanation of the last of `tapes`; `source` (and sizes) when already generated."""
    final = list(tapes.values())[-1]
    groups = steps(final, Dims(final).scope(final)) if backend != "interpret" else []
    if backend != "numba":
        return Explanation(title, tapes, groups, "", np.zeros(0, np.int64), tuple(notes))
    if source is None:
        from .codegen.cpu import generate      # (not imported with tapejit: 3 ms)
        source = generate(final)[:2]
    text, sizes = source
    return Explanation(title, tapes, groups, text, sizes, tuple(notes))


_STAGE_NOTES = {"traced": "traced: the primal tape",
                "rerolled": "rerolled: repeated steps of plain Python loops as one scan each",
                "autodiff": "autodiff: the joint tape (forward sweep, then reverse sweep)",
                **{name: f"after {name}: {doc}" for name, _, doc in PIPELINE},
                "fuse": f"after fuse: {FUSION}"}


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
    if ex.groups or ex.source:
        loops = sum(isinstance(s, Loop) for s in ex.groups)
        out.append(f"== fusion groups: {loops} loops, {len(ex.groups) - loops} calls ==")
        out += [*render_groups(ex.groups), ""]
    if not ex.source:
        out.append("(no generated source shown for this backend)" if ex.groups else
                   "(the interpret backend runs the last tape on numpy: no fusion, no code)")
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


def dump(name: str, tape: Tape, source: str, sizes: np.ndarray) -> None:
    """With TAPEJIT_DUMP set, write the explanation of a compiled program (its module's `name`,
    fused tape, generated source and size table) to that directory. A dump that cannot be
    written warns: it must never break the program."""
    folder = config().dump_dir
    if folder is None:
        return
    ex = build(f"program {name}", {"compiled: the fused tape": fused(tape)}, "numba",
               source=(source, sizes))
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
