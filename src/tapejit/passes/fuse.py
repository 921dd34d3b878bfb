"""Fusion: group a tape's eqns into loop nests, each one `fused` eqn whose body sub-tape holds
the group (the op is defined here, below). The compiler runs each fused eqn as one explicit loop nest; everything
else (matrix products, gathers, scatters, scans, layout copies) is a barrier with its own code.

A `Loop` is one loop nest over a `domain`: the dims (dims.py) of the values it computes, axes
of length 1 dropped (a loop over a scalar domain is straight-line code). Domains are compared
by axis symbol, never by length. It holds elementwise eqns whose output has the domain's shape,
views producing that shape (layout ops whose record has a `View`: read from memory through an
index map), and the reductions whose record has a `Reduction` (sum/max/min) that consume them
(accumulated inside the nest). Values that live
only inside a loop never touch memory.

An eqn joins the loop it fits that computes most of its inputs (else a new one) when everything
it reads is ready there: values of that loop computed before it (not the loop's own reductions,
which finish only after the nest) and read at the loop position they were computed at (a
broadcast that lines a value up with an inner axis needs it from memory), or values of
earlier groups. Loops are capped at
`MAX_LOOP_OPS` ops, about where LLVM stops vectorising a loop body (bodies calling libm's
sin/exp are not vectorised anyway, and every split costs an array written and read back).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..avals import Aval
from ..batching import batched_body
from ..dims import Dim, Dims
from ..errors import IRError
from ..interpret import evaluate
from ..ir import Eqn, Tape, Var, make_params
from ..ops import OPS, Kind, defop, is_view, nest_reduction


# ---- the op: `fused`, a group run as one loop nest. Its `body` param is a closed sub-tape
# holding the group's eqns; the eqn's inputs bind the body's inputs and its outputs are the
# body's outputs (the values read outside the group). Fusion runs after differentiation, and
# transforms that inline a fused tape into a trace inline its bodies (interpret.inline), so a
# fused eqn is never differentiated.
def _shape(*avals: Aval, body: Any) -> tuple[Aval, ...]:
    expected = tuple(v.aval for v in body.invars)
    if tuple(avals) != expected:
        raise IRError(f"fused: inputs {' '.join(map(str, avals))} do not match the body's "
                      f"inputs {' '.join(map(str, expected))}")
    return tuple(o.aval for o in body.outvars)


def _impl(*ins: Any, body: Any) -> tuple:
    return tuple(evaluate(body, ins))


def _vjp(cts: Any, outs: Any, *ins: Any, body: Any) -> tuple:
    raise IRError("a fused group is not differentiated: fusion runs after differentiation")


# batched: its body's eqns batched in its place (fusion groups them again)
fused = defop("fused", Kind.FUSED, _impl, shape=_shape, vjp=_vjp, multiple_results=True,
              batch=lambda bind, xs, flags, *, body: batched_body(body, xs, flags))


MAX_LOOP_OPS = 40


@dataclasses.dataclass
class Loop:
    """A loop nest over `domain`; eqns whose domain extends it (`domain` + inner axes) run in
    inner loops ("stages") inside each iteration of the nest, in order."""

    domain: tuple[Dim, ...]
    eqns: list[Eqn] = dataclasses.field(default_factory=list)
    stage_of: dict[str, int] = dataclasses.field(default_factory=dict)   # var -> stage
    stages: list[tuple[Dim, ...]] = dataclasses.field(default_factory=list)  # their domains
    reductions: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def op_count(self) -> int:
        return len(self.eqns)

    def add(self, eqn: Eqn, domain: tuple[Dim, ...]) -> None:
        """Append `eqn`, of loop domain `domain`, as the last eqn of the nest."""
        if not self.stages or self.stages[-1] != domain:
            self.stages.append(domain)
        self.eqns.append(eqn)
        self.stage_of[eqn.outs[0].name] = len(self.stages) - 1
        if nest_reduction(eqn):
            self.reductions[eqn.outs[0].name] = reduced_axes(eqn)

    def complete(self, name: str, outer: tuple[Dim, ...] | None = None) -> bool:
        """Whether reduction `name` is complete inside one iteration of the nest (over
        `outer`, by default its domain): it reduces exactly the inner axes of its stage, so
        later stages may read it."""
        outer = self.domain if outer is None else outer
        stage = self.stages[self.stage_of[name]]
        return set(self.reductions[name]) == set(range(len(outer), len(stage)))


Names = dict[str, tuple[Dim, ...]]   # a tape's dims by var name (dims.py)


def squeezed(dims: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """The loop domain of a value: its axes of length 1 need no loop."""
    return tuple(d for d in dims if d.size != 1)


def loop_domain(eqn: Eqn, dims: Names) -> tuple[Dim, ...] | None:
    kind = OPS[eqn.op].kind
    if kind is Kind.ELEMENTWISE or is_view(eqn):
        return squeezed(dims[eqn.outs[0].name])
    if nest_reduction(eqn):
        return squeezed(dims[eqn.ins[0].name])
    return None


def reduced_axes(eqn: Eqn) -> tuple[int, ...]:
    """A reduction's reduced axes, as positions in its (squeezed) loop domain."""
    shape = eqn.ins[0].aval.shape
    position = {a: k for k, a in enumerate(d for d, n in enumerate(shape) if n != 1)}
    return tuple(sorted(position[a] for a in eqn.kw["axes"] if shape[a] != 1))


def _placement(loop: Loop, domain: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """The loop's outer domain if an eqn of `domain` joins it, or None if it cannot.
    An eqn may extend the domain (an inner stage), or be a prefix of the domain of a loop with
    a single stage (which then becomes that outer domain's first inner stage)."""
    if not loop.domain and domain:
        return None               # nothing to share with a scalar loop
    if domain[:len(loop.domain)] == loop.domain:
        return loop.domain
    if loop.domain[:len(domain)] == domain and len(set(loop.stages)) == 1 and domain:
        return domain
    return None


def _fits(loop: Loop, index: int, eqn: Eqn, domain: tuple[Dim, ...], outer: tuple[Dim, ...],
          producer: dict[str, int]) -> bool:
    """Whether `eqn` can run in `loop` (with outer domain `outer`): all it reads is ready."""
    if loop.op_count() >= MAX_LOOP_OPS:
        return False
    last = len(loop.stages) - 1
    same_stage = bool(loop.stages) and loop.stages[last] == domain
    for atom in eqn.ins:
        if not isinstance(atom, Var) or atom.name not in producer:
            continue
        where = producer[atom.name]
        if where > index:
            return False
        if where < index:
            continue
        stage = loop.stage_of[atom.name]
        held = loop.stages[stage]     # the loop positions at which the loop holds the value
        if atom.name in loop.reductions:
            if not loop.complete(atom.name, outer) or (same_stage and stage == last):
                return False      # not complete before the nest ends, or still running
            held = outer
        if is_view(eqn):
            if not (held == outer and _places_outer(eqn, outer)):
                return False      # other views read their operand from memory
        elif not _read_in_place(eqn, atom):
            return False          # the loop holds it at another position than it is read
    return True


def _read_in_place(eqn: Eqn, atom: Var) -> bool:
    """Whether an elementwise eqn or a reduction reads `atom` at the loop position `atom` was
    computed at: its axes of length > 1 are the first ones of the eqn's domain, in order
    (numpy's broadcasting lines operands up from the right: a (n,) operand of a (n, n) result
    is read along the inner axis)."""
    shape = eqn.outs[0].aval.shape if OPS[eqn.op].kind is Kind.ELEMENTWISE \
        else eqn.ins[0].aval.shape
    offset = len(shape) - atom.aval.ndim
    position = {a: k for k, a in enumerate(d for d, n in enumerate(shape) if n != 1)}
    read = [position[offset + a] for a, n in enumerate(atom.aval.shape) if n != 1]
    return read == list(range(len(read)))


def _places_outer(eqn: Eqn, outer: tuple[Dim, ...]) -> bool:
    """A view placing a value of the outer domain on the outer axes (a broadcast along inner
    axes only, a squeeze): inside the loop it is that value's local."""
    placed = OPS[eqn.op].view.placed
    if placed is None:
        return False
    axes = placed(eqn)
    loop_axes = [d for d, n in enumerate(eqn.outs[0].aval.shape) if n != 1]
    return len(axes) == len(outer) and axes == loop_axes[:len(axes)]


def fuse(tape: Tape) -> Tape:
    """Each loop nest of `tape` as one `fused` eqn (in the order the nests run)."""
    dims = Dims(tape).scope(tape)
    groups: list[Loop | Eqn] = []
    producer: dict[str, int] = {}  # var name -> index of the group computing it
    for eqn in tape.eqns:
        domain = loop_domain(eqn, dims)
        if domain is None:
            groups.append(eqn)
            target = len(groups) - 1
        else:
            target = _join(groups, eqn, domain, producer)
        for out in eqn.outs:
            producer[out.name] = target
    read_after = _read_after(groups, tape)
    reverse = set(tape.eqns[tape.reverse_start:]) if tape.reverse_start is not None else set()
    eqns = tuple(g if isinstance(g, Eqn) else _fused_eqn(g, read_after[k], reverse)
                 for k, g in enumerate(groups))
    # a group may mix both sweeps: the reverse sweep starts at the first group of reverse eqns
    # only, and a mixed group's body marks where its own reverse eqns start
    first_reverse = next((k for k, g in enumerate(groups)
                          if all(e in reverse for e in _eqns(g))), len(groups))
    return Tape(tape.invars, eqns, tape.outvars, tape.constvars, tape.consts,
                None if tape.reverse_start is None else first_reverse)


def _eqns(group: Loop | Eqn) -> list[Eqn]:
    return group.eqns if isinstance(group, Loop) else [group]


def _read_after(groups: list[Loop | Eqn], tape: Tape) -> list[set[str]]:
    """Per group: the names it defines that a later group or the tape's outputs read."""
    outside = {o.name for o in tape.outvars if isinstance(o, Var)}
    result: list[set[str]] = [set() for _ in groups]
    for k in range(len(groups) - 1, -1, -1):
        group = groups[k]
        eqns = _eqns(group)
        defined = {o.name for e in eqns for o in e.outs}
        result[k] = defined & outside
        outside |= {a.name for e in eqns for a in e.ins if isinstance(a, Var)} - defined
    return result


def _fused_eqn(loop: Loop, needed: set[str], reverse: set[Eqn]) -> Eqn:
    """The `fused` eqn of a loop: its body reads the loop's inputs under their own names and
    returns the values read after it, so names stay the same inside and out."""
    defined = {o.name for e in loop.eqns for o in e.outs}
    inputs: dict[str, Var] = {}
    for eqn in loop.eqns:
        for a in eqn.ins:
            if isinstance(a, Var) and a.name not in defined:
                inputs.setdefault(a.name, a)
    outs = tuple(o for e in loop.eqns for o in e.outs if o.name in needed)
    mixed = next((k for k, e in enumerate(loop.eqns) if e in reverse), None)
    body = Tape(tuple(inputs.values()), tuple(loop.eqns), outs, reverse_start=mixed or None)
    return Eqn(fused.name, body.invars, outs, make_params({"body": body}), loop.eqns[-1].src)


def loop_of(body: Tape, dims: Names) -> Loop:
    """The loop nest of a fused eqn's body, as `fuse` built it: its domain is the shortest of
    its stages' domains (every stage extends it)."""
    loop = Loop(())
    for eqn in body.eqns:
        domain = loop_domain(eqn, dims)
        assert domain is not None, f"{eqn.op} cannot run in a loop nest"
        loop.add(eqn, domain)
    loop.domain = min(loop.stages, key=len)
    return loop


def _join(groups: list[Loop | Eqn], eqn: Eqn, domain: tuple[Dim, ...],
          producer: dict[str, int]) -> int:
    """Put `eqn` in a loop it fits (or a new one): the one computing most of its inputs, else
    the latest. Return that group's index. Only the groups from the last one computing an
    input on can hold it (`_fits`): the others are not looked at."""
    best, best_outer, best_affinity = None, None, -1
    first = max((producer[a.name] for a in eqn.ins
                 if isinstance(a, Var) and a.name in producer), default=0)
    for index in range(len(groups) - 1, first - 1, -1):
        loop = groups[index]
        if not isinstance(loop, Loop):
            continue
        outer = _placement(loop, domain)
        if outer is None or not _fits(loop, index, eqn, domain, outer, producer):
            continue
        affinity = sum(1 for a in eqn.ins if isinstance(a, Var) and producer.get(a.name) == index)
        if affinity > best_affinity:
            best, best_outer, best_affinity = index, outer, affinity
    if best is None:
        groups.append(Loop(domain))
        index, loop = len(groups) - 1, groups[-1]
    else:
        index, loop = best, groups[best]
        loop.domain = best_outer
    assert isinstance(loop, Loop)
    loop.add(eqn, domain)
    return index
