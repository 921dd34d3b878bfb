"""Which values of a fused tape live in arrays, and which are recomputed where read.

- A value computed in a loop and read only there stays a scalar in registers.
- A value of a scalar domain stays a Python local for the rest of the program.
- A view (broadcast, transpose, slice, ...; views.py) is never copied: whoever reads it reads
  its operand through the index map. (Recomputing cheap elementwise values where they are read,
  instead of storing them, was measured slower: Lennard-Jones 36 ms against 19.5 ms.)
- Everything else read by another step, every operand of a call and every tape output is an
  array. Eqns of a loop whose results nobody needs are not emitted.
- A value of an inner stage read by a later stage of its nest is stored in an array, unless it
  is one elementwise op on inputs (`x[i] - x[j]`): that is recomputed where it is read. So is a
  value of at least 2^15 elements that loops of later steps read when at most two arithmetic
  ops recompute it from arrays stored anyway, inputs or views of them (`1 - t*t` from `t`).
- An array the program allocates is reused, once nothing reads it any more, for a later value
  of the same shape and dtype (`last_read`; codegen/cpu.py allocates).

How a nest maps onto parallel hardware is a property of the nest too (`parallel_axes`,
`serial_dims`, `short`): the axes whose iterations are independent, and what one iteration of
them runs through on its own. The CUDA backend gives one thread to each such iteration where
that work is short or the block forms would waste the block (codegen/cuda_thread.py).
"""
from __future__ import annotations

import dataclasses
import math

from ..dims import Dim
from ..ir import Atom, Eqn, Lit, Tape, Var
from ..ops import OPS, Kind, nest_reduction
from .schedule import Call, Loop, Step
from .views import is_view

SHORT = 32   # a loop over at most this many elements is short

@dataclasses.dataclass
class Plan:
    arrays: set[str]                 # vars stored in arrays
    inline: dict[str, Eqn]           # views, read through their index maps: name -> eqn
    scalar: set[str]                 # vars of a scalar domain (Python locals)
    live: dict[int, list[Eqn]]       # per loop step: the eqns to emit, in order
    last_read: dict[str, float]      # var -> the last step reading it or a view of it (inf:
                                     # an output, or aliased by an output)
    recomputed: dict[str, Eqn]       # values recomputed where read, not stored: name -> eqn


def plan(tape: Tape, steps: list[Step]) -> Plan:
    where: dict[str, int] = {}
    for index, step in enumerate(steps):
        for eqn in _eqns(step):
            for out in eqn.outs:
                where[out.name] = index
    shapes = {eqn.outs[0].name: eqn.outs[0].aval.shape for step in steps for eqn in _eqns(step)}
    scalar = {name for name, index in where.items()      # all-unit results of loops
              if isinstance(steps[index], Loop) and all(n == 1 for n in shapes[name])}
    inline = _inlinable(steps)
    arrays = {o.name for o in tape.outvars if isinstance(o, Var)}
    cheap = _cheap(steps, where, inline)
    recomputed: dict[str, Eqn] = {}

    def use(name: str, reader: int, stage: int | None) -> None:
        if name not in where or name in scalar:
            return
        producer = steps[where[name]]
        if where[name] == reader:
            # within a loop, a value of an inner stage is gone once its stage ends
            assert isinstance(producer, Loop)
            mine = producer.stage_of[name]
            if mine == stage or producer.stages[mine] == producer.domain \
                    or name in producer.reductions:
                return
            if name in cheap:          # one op on inputs: cheaper than an array round trip
                recomputed[name] = cheap[name]
                return
            arrays.add(name)
        elif name in inline:
            for atom in inline[name].ins:
                if isinstance(atom, Var):
                    use(atom.name, reader, None)
        else:
            arrays.add(name)

    for index, step in enumerate(steps):
        for eqn in _eqns(step):
            stage = step.stage_of[eqn.outs[0].name] if isinstance(step, Loop) else None
            for atom in eqn.ins:
                if isinstance(atom, Var):
                    if isinstance(step, Call) and atom.name not in scalar:
                        arrays.add(atom.name)
                    use(atom.name, index, stage)
    arrays -= scalar          # (a scalar output becomes an array only at the return)
    _rematerialize(tape, steps, where, arrays, inline, recomputed)
    live = {index: _live(step, arrays, scalar) for index, step in enumerate(steps)
            if isinstance(step, Loop)}
    return Plan(arrays, inline, scalar, live,
                _last_reads(tape, steps, {**inline, **recomputed}), recomputed)


REMAT_OPS = 2   # at most this many elementwise ops are recomputed instead of stored
REMAT_MIN_SIZE = 1 << 15   # ... of a value this large: a smaller array stays in cache
# ... and only ops whose record says `cheap` (arithmetic): a tanh recomputed costs more than
# the store and load it saves


def _rematerialize(tape: Tape, steps: list[Step], where: dict[str, int], arrays: set[str],
                   inline: dict[str, Eqn], recomputed: dict[str, Eqn]) -> None:
    """Values that loops of later steps read, computed by at most REMAT_OPS arithmetic ops from
    arrays kept anyway, inputs or views of them: recomputed by their readers instead of stored
    (tanh's derivative 1 - t*t from the stored t), saving an array written and read back. The
    ops may include values recomputed already (the GMM's q * (x - mu), with x - mu recomputed
    too). Not for outputs nor for values a call reads (calls take arrays)."""
    producers = {e.outs[0].name: e for step in steps if isinstance(step, Loop)
                 for e in step.eqns if OPS[e.op].cheap}
    called = {a.name for step in steps if isinstance(step, Call) for a in step.eqn.ins
              if isinstance(a, Var)}
    outputs = {o.name for o in tape.outvars if isinstance(o, Var)}
    candidates = {n for n in arrays if n in producers and n not in called | outputs
                  and producers[n].outs[0].aval.size >= REMAT_MIN_SIZE}

    def kept(atom: Atom) -> bool:
        """Readable by any later step as it is: a literal, an input, a kept array, a view."""
        if isinstance(atom, Lit) or atom.name not in where:
            return True
        if atom.name in inline:
            return all(kept(a) for a in inline[atom.name].ins)
        return atom.name in arrays and atom.name not in candidates

    def tree(name: str, budget: int) -> dict[str, Eqn] | None:
        """The eqns recomputing `name` from kept arrays, inputs and literals, within budget."""
        eqn = producers.get(name)
        if eqn is None or budget == 0:
            return None
        nodes = {name: eqn}
        for atom in eqn.ins:
            if kept(atom):
                continue
            sub = tree(atom.name, budget - len(nodes))
            if sub is None:
                return None
            nodes.update(sub)
        return nodes if len(nodes) <= budget else None

    for name in [n for n in producers if n in candidates]:      # in the order they run
        nodes = tree(name, REMAT_OPS)
        if nodes is not None and not (set(nodes) - {name}) & (candidates - set(recomputed)):
            arrays.discard(name)
            recomputed.update(nodes)


def _cheap(steps: list[Step], where: dict[str, int], inline: dict[str, Eqn]) -> dict[str, Eqn]:
    """Elementwise eqns of one op on inputs, literals or views of inputs (x[i] - x[j] in a
    pairwise nest): recomputing one where a later stage of its nest reads it costs less than
    writing and reading back an array of the nest's full size (Lennard-Jones: an n*n*3 array)."""
    def free(atom: Atom) -> bool:
        if isinstance(atom, Lit) or atom.name not in where:
            return True
        view = inline.get(atom.name)
        return view is not None and all(free(a) for a in view.ins)

    return {eqn.outs[0].name: eqn for step in steps if isinstance(step, Loop)
            for eqn in step.eqns
            if OPS[eqn.op].kind is Kind.ELEMENTWISE and all(free(a) for a in eqn.ins)}


def _last_reads(tape: Tape, steps: list[Step], inline: dict[str, Eqn]) -> dict[str, float]:
    """When each value's array is last needed: the last step reading it or a view of it, and
    as long as the result of any call that may return a view of it (a reshape, a loop)."""
    last: dict[str, float] = {}

    def read(name: str, step: float) -> None:
        last[name] = max(last.get(name, -1), step)
        view = inline.get(name)
        if view is not None:
            for atom in view.ins:
                if isinstance(atom, Var):
                    read(atom.name, step)

    for index, step in enumerate(steps):
        for eqn in _eqns(step):
            for atom in eqn.ins:
                if isinstance(atom, Var):
                    read(atom.name, index)
    for atom in tape.outvars:
        if isinstance(atom, Var):
            read(atom.name, math.inf)
    for step in reversed(steps):      # later aliases first: a chain of reshapes
        if isinstance(step, Call) and not OPS[step.eqn.op].fresh:
            end = max(last.get(o.name, -1) for o in step.eqn.outs)
            for atom in step.eqn.ins:
                if isinstance(atom, Var):
                    read(atom.name, end)
    return last


def _eqns(step: Step) -> list[Eqn]:
    return step.eqns if isinstance(step, Loop) else [step.eqn]


def _inlinable(steps: list[Step]) -> dict[str, Eqn]:
    """The views: read through their index maps wherever they are used."""
    return {eqn.outs[0].name: eqn for step in steps if isinstance(step, Loop)
            for eqn in step.eqns if is_view(eqn)}


def _live(loop: Loop, arrays: set[str], scalar: set[str]) -> list[Eqn]:
    """The eqns of a loop that compute something needed: stored, accumulated, kept as a
    scalar local, or read by another needed eqn of the loop."""
    needed: set[str] = set()
    kept: list[Eqn] = []
    for eqn in reversed(loop.eqns):
        name = eqn.outs[0].name
        reduction = nest_reduction(eqn) is not None
        if reduction or name in arrays or name in scalar or name in needed:
            kept.append(eqn)
            needed.update(a.name for a in eqn.ins if isinstance(a, Var))
    return kept[::-1]


def parallel_axes(loop: Loop) -> list[int]:
    """The domain axes of `loop` whose iterations are independent: no reduction of the nest
    reduces them, unless it reduces every axis of its stage (a loss, summed at the end)."""
    reduced: set[int] = set()
    for name, axes in loop.reductions.items():
        if set(axes) != set(range(len(loop.stages[loop.stage_of[name]]))):
            reduced.update(a for a in axes if a < len(loop.domain))
    return [a for a in range(len(loop.domain)) if a not in reduced]


def serial_dims(loop: Loop, parallel: list[int]) -> list[tuple[Dim, ...]]:
    """Per stage, the axes one iteration of the `parallel` axes runs through: the domain's
    other axes and the stage's inner ones."""
    return [tuple(n for a, n in enumerate(stage) if a not in parallel) for stage in loop.stages]


def short(dims: tuple[Dim, ...]) -> bool:
    """Whether a loop over `dims` is short: at most SHORT elements at their traced lengths (a
    new length traces again; lengths of inputs' short trailing axes are numbers in the source,
    codegen/cpu.py's fixed_symbols, so such loops unroll)."""
    return math.prod(n.size for n in dims) <= SHORT
