"""The numpy interpreter: evaluates any tape op by op. It is the ground truth every compiled
path is tested against, and the `"interpret"` backend.

`evaluate` walks a tape, from a plan of it made once (its eqns' implementations, params and
reads, and which values each drops; a fused group's eqns in its place), applying each eqn's
numpy implementation (`interpret` on a call's arguments) or a given way of applying it
(then group by group); `inline` binds them
(a fused group's eqns one by one) (so on tracers it copies the tape into the current trace,
keeping each eqn's source line: how a transform called inside a trace composes).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .errors import IndexOutOfBoundsError, LinAlgError, OutOfMemoryError
from .ir import Atom, Eqn, Lit, Tape, Var, sub_tapes
from .ops import OPS, Kind
from .avals import aval_of
from .trace import Tracer, bind_recorded, current_trace, recording_source


def _lit_value(lit: Lit) -> Any:
    return lit.aval.dtype.type(lit.value)


class _Step(NamedTuple):
    eqn: Eqn
    impl: Callable[..., Any]
    kw: dict[str, Any]
    reads: tuple[tuple[str | None, Any], ...]    # (name, None), or (None, a literal's value)
    outs: tuple[str, ...]
    multiple: bool
    drops: tuple[str, ...]
    get: Callable[[dict], Sequence[Any]]         # `reads`, read from the values by name


def _getter(reads: tuple[tuple[str | None, Any], ...]) -> Callable[[dict], Sequence[Any]]:
    """The reads of a step as one call on the values by name: an itemgetter where they are
    all names (0.05 us against 0.18 us a list)."""
    names = tuple(name for name, _ in reads)
    if None in names:
        return lambda env: [env[name] if name is not None else value for name, value in reads]
    if len(names) == 1:
        return lambda env: (env[names[0]],)
    return operator.itemgetter(*names) if names else lambda env: ()


class Plan(NamedTuple):
    """A tape ready to run on the interpreter (`evaluate`)."""
    tape: Tape
    steps: tuple[_Step, ...]
    outs: tuple[tuple[str | None, Any], ...]
    ins: tuple[str, ...]            # the names of the tape's inputs
    consts: tuple[str, ...]         # ... and of its constants


# numpy's ufuncs whose Python operator on numpy scalars (numpy's scalar math) gives the same
# value and type for every operand, 5-15x sooner (0.04 us against 0.57 us a multiply): what an
# eqn of 0-d values runs (scalar code: a series, a Newton step). Not power: its ufunc takes
# x**0.5 as sqrt(x), which differs at -0.0 and -inf.
_SCALAR_MATH = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
                np.divide: operator.truediv, np.remainder: operator.mod,
                np.floor_divide: operator.floordiv, np.negative: operator.neg,
                np.absolute: operator.abs, np.less: operator.lt, np.less_equal: operator.le,
                np.greater: operator.gt, np.greater_equal: operator.ge, np.equal: operator.eq,
                np.not_equal: operator.ne}


# the plans of tapes without constants (loop bodies, fused groups), by id(tape) and whether
# fused groups run in place: each keeps its tape, so an id is never reused while its plan is
# here. A tape with constants (a program's, which may hold the user's data) is planned by
# whoever runs it again (the runners).
_PLANS: dict[tuple[int, bool], Plan] = {}
_PLAN_LIMIT = 512

Read = tuple[str | None, Any]       # a value by name, or (None, a literal's or constant's value)


def _read(atom: Atom, names: Callable[[str], Read]) -> Read:
    return (None, _lit_value(atom)) if isinstance(atom, Lit) else names(atom.name)


def _flat(tape: Tape, names: Callable[[str], Read], in_place: bool, outs: Sequence[str] = (),
          prefix: str = "", group: Eqn | None = None) -> list[tuple[Any, ...]]:
    """`tape`'s eqns as (eqn, impl, params, reads, outputs, multiple); with `in_place`, a
    fused group's body's eqns in its place: its inputs read what the group reads, its other
    values named under a prefix of their own, its outputs named as the group's (`outs`; an
    output that is an input, a literal or repeated is copied by name)."""
    kept = list(zip(tape.outvars, outs))
    made = {o.name for eqn in tape.eqns for o in eqn.outs}
    named = {v.name: name for v, name in kept if isinstance(v, Var) and v.name in made}

    def rename(name: str) -> str:
        return named.get(name) or prefix + name

    def local(name: str) -> Read:
        return (rename(name), None) if name in made else names(name)
    steps = []
    for k, eqn in enumerate(tape.eqns):
        reads = tuple(_read(a, local) for a in eqn.ins)
        written = tuple(rename(o.name) for o in eqn.outs)
        op = OPS[eqn.op]
        if in_place and op.kind is Kind.FUSED:
            body = eqn.kw["body"]
            given = dict(zip((v.name for v in body.invars), reads))
            given.update((v.name, (None, c)) for v, c in zip(body.constvars, body.consts))
            steps += _flat(body, given.__getitem__, True, written, f"{prefix}{k}\x1f", eqn)
        else:
            steps.append((eqn, _impl(op.impl, eqn), eqn.kw, reads, written,
                          op.multiple_results))
    for v, name in kept:
        if not (isinstance(v, Var) and named.get(v.name) == name):
            steps.append((group, _same, {}, (_read(v, local),), (name,), False))
    return steps


def _impl(impl: Callable[..., Any], eqn: Eqn) -> Callable[..., Any]:
    """`impl`, or numpy's scalar math for it where `eqn` makes 0-d values (`_SCALAR_MATH`)."""
    if type(impl) is np.ufunc and not eqn.kw and all(not o.aval.shape for o in eqn.outs):
        return _SCALAR_MATH.get(impl, impl)
    return impl


def _same(x: Any) -> Any:
    return x


def _named(name: str) -> Read:
    return name, None


def plan(tape: Tape, in_place: bool = True) -> Plan:
    """`tape`'s plan: its eqns' implementations, params and reads, and what each drops; with
    `in_place`, a fused group's eqns run one by one in its place (the interpreter gains
    nothing from the group, and each would cost a walk of its own)."""
    made = _PLANS.get((id(tape), in_place))
    if made is not None and made.tape is tape:
        return made
    flat = _flat(tape, _named, in_place)
    last = {name: k for k, (*_, reads, _outs, _m) in enumerate(flat) for name, _ in reads}
    for o in tape.outvars:
        if isinstance(o, Var):
            last[o.name] = len(flat)
    drops: list[list[str]] = [[] for _ in flat]
    for name, k in last.items():
        if name is not None and k < len(flat):
            drops[k].append(name)
    for k, (*_, outs, _m) in enumerate(flat):       # written, never read
        drops[k] += [name for name in outs if name not in last]
    made = Plan(tape, tuple(_Step(eqn, impl, kw, reads, outs, multiple, tuple(dropped),
                                  _getter(reads))
                            for (eqn, impl, kw, reads, outs, multiple), dropped
                            in zip(flat, drops)),
                tuple(_read(v, _named) for v in tape.outvars),
                tuple(v.name for v in tape.invars), tuple(v.name for v in tape.constvars))
    if not tape.consts:
        if len(_PLANS) >= _PLAN_LIMIT:
            try:
                del _PLANS[next(iter(_PLANS))]
            except (KeyError, RuntimeError, StopIteration):     # another thread's
                pass
        _PLANS[(id(tape), in_place)] = made
    return made


def evaluate(tape: Tape, args: Sequence[Any],
             apply: Callable[[Eqn, list[Any]], Any] | None = None,
             consts: Sequence[Any] | None = None, planned: Plan | None = None) -> list[Any]:
    """`tape`'s outputs on `args` (and `consts` for its constants), each eqn applied by
    `apply(eqn, ins)`, by default its numpy implementation (an index out of range, a failed
    allocation or a LinAlgError then names the eqn's op and line: `located`), from the tape's plan (`planned`, where the caller keeps it)."""
    _, steps, outs, ins, const_names = planned or plan(tape, in_place=apply is None)
    env: dict[str | None, Any] = dict(zip(ins, args))
    if const_names:
        env.update(zip(const_names, tape.consts if consts is None else consts))
    for step in steps:
        if apply is not None:
            result = apply(step.eqn, list(step.get(env)))
        else:
            try:
                result = step.impl(*step.get(env), **step.kw) if step.kw else \
                    step.impl(*step.get(env))
            except (IndexOutOfBoundsError, MemoryError, np.linalg.LinAlgError) as err:
                raise located(err, step.eqn) from None
        if step.multiple:
            env.update(zip(step.outs, result))
        else:
            env[step.outs[0]] = result
        for name in step.drops:
            env.pop(name, None)
    return [env[name] if name is not None else value for name, value in outs]


def apply_impl(eqn: Eqn, ins: list[Any]) -> Any:
    """`eqn`'s numpy code on `ins`, its errors `located`."""
    try:
        return OPS[eqn.op].impl(*ins, **eqn.kw)
    except (IndexOutOfBoundsError, MemoryError, np.linalg.LinAlgError) as err:
        raise located(err, eqn) from None


def located(err: IndexOutOfBoundsError | MemoryError | np.linalg.LinAlgError,
            eqn: Eqn) -> BaseException:
    """`err`, raised by `eqn`'s numpy code, naming its op and line (unless raised inside a
    sub-tape: located there); numpy's MemoryError as OutOfMemoryError, its LinAlgError as
    tapejit's."""
    if isinstance(err, IndexOutOfBoundsError):
        return err if err.op is not None else err.located(eqn.op, eqn.src)
    if isinstance(err, np.linalg.LinAlgError):
        return err if isinstance(err, LinAlgError) else LinAlgError(str(err), eqn.op, eqn.src)
    return out_of_memory(err, eqn=eqn)


def out_of_memory(err: MemoryError, tape: Tape | None = None,
                  eqn: Eqn | None = None) -> OutOfMemoryError:
    """numpy's MemoryError `err` as OutOfMemoryError, naming `eqn` (whose numpy code raised
    it), else the eqns of `tape` making an array of that size (a compiled program of `tape`
    allocating its arrays raised it), or, where `err` gives no size (numba's), those making
    its largest arrays."""
    if isinstance(err, OutOfMemoryError):
        return err
    shape, dtype = getattr(err, "shape", None), getattr(err, "dtype", None)   # numpy's
    if (shape is None or dtype is None) and eqn is not None:    # else: the eqn's largest output
        shape, dtype = max((o.aval for o in eqn.outs), key=lambda a: _nbytes(*a))
    if shape is None or dtype is None:
        return OutOfMemoryError(None, () if tape is None else makers(tape, largest(tape)))
    nbytes = _nbytes(shape, dtype)
    return OutOfMemoryError(nbytes, makers(tape, nbytes) if eqn is None else
                            ((eqn.op, eqn.src, _array(shape, dtype)),))


def _nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def _array(shape: tuple[int, ...], dtype: Any) -> str:
    name = np.dtype(dtype).name
    return f"{'an' if name.startswith('int') else 'a'} {name} array of shape {tuple(shape)}"


def _apply_bind(eqn: Eqn, ins: list[Any]) -> Any:
    with recording_source(eqn.src):
        return bind_recorded(OPS[eqn.op], ins, eqn.kw)


def interpret(tape: Tape, args: Sequence[Any], planned: Plan | None = None) -> list[Any]:
    """Run the tape on numpy values (from its plan, where the caller keeps it). Floating-point
    warnings are silenced: a joint tape may compute both sides of a select, as compiled code
    does."""
    with np.errstate(all="ignore"):
        outs = evaluate(tape, [np.asarray(a) for a in args], planned=planned)
    return [np.asarray(o, dtype=v.aval.dtype) for o, v in zip(outs, tape.outvars)]


_SCALARS = (bool, int, float, complex)


class Growing:
    """The values of a growing tape's vars on fixed inputs (a trace asking for the values of
    its tracers as it records: guards), each eqn applied once and only where a value asked
    for needs it: linear in the tape's length where evaluating each snapshot from the start
    was quadratic (a Python `while` on data, 417 iterations: 1.42 s of its trace). Values
    past LIMIT bytes are dropped and computed again if needed.

    `inlined`: the inputs are an enclosing trace's tracers (a transform called inside
    another's trace), and the eqns are bound into that trace (`inline`), each once: the value
    asked for is a tracer of it."""

    LIMIT = 256 << 20

    def __init__(self, args: Sequence[Any], inlined: bool = False) -> None:
        self.args = list(args) if inlined else [np.asarray(a) for a in args]
        self.apply = _apply_bind if inlined else apply_impl
        self.inlined = inlined
        self._reset()

    def _reset(self) -> None:
        self.env: dict[str, Any] = {}
        self.given: dict[str, Any] = {}      # the inputs' and constants' values by name
        self.consts = 0
        self.made: dict[str, int] = {}       # var name -> the eqn that makes it
        self.eqns: tuple[Eqn, ...] = ()
        self.nbytes = 0

    def value(self, tape: Tape) -> Any:
        """The value of `tape`'s one output: a snapshot of the tape whose earlier snapshots
        this was asked for (their eqns a prefix of its eqns). None where it needs a constant
        that is a tracer (captured from an enclosing trace), an input that is one (unless
        `inlined`) or an input whose value is not of its var's shape (vmap's batch for a
        per-example var)."""
        seen = len(self.eqns)
        if seen > len(tape.eqns) or (seen and tape.eqns[seen - 1] is not self.eqns[-1]) \
                or self.nbytes > self.LIMIT:
            self._reset()
            seen = 0
        for k in range(seen, len(tape.eqns)):
            self.made.update((o.name, k) for o in tape.eqns[k].outs)
        self.eqns, given = tape.eqns, self.given
        if not seen:
            # a Python scalar takes its input's dtype here: bound as is, it would take that
            # of the op's other operands
            given.update((v.name, np.asarray(a, v.aval.dtype) if isinstance(a, _SCALARS) else a)
                         for v, a in zip(tape.invars, self.args))
            self.inputs = {v.name for v in tape.invars}
        given.update((tape.constvars[k].name, tape.consts[k])
                     for k in range(self.consts, len(tape.consts)))
        self.consts = len(tape.consts)
        needed, touched = self._needed(tape.outvars[0], given)
        avals = {v.name: v.aval for v in tape.invars}
        if any((isinstance(given[n], Tracer) and not (self.inlined and n in self.inputs))
               or (n in avals and aval_of(given[n]) != avals[n]) for n in touched):
            return None
        with np.errstate(all="ignore"):
            for k in needed:
                eqn = tape.eqns[k]
                result = self.apply(eqn, [self._read(a, given) for a in eqn.ins])
                results = result if OPS[eqn.op].multiple_results else (result,)
                for o, r in zip(eqn.outs, results):
                    self.env[o.name] = r
                    self.nbytes += getattr(r, "nbytes", 8)
        out = tape.outvars[0]
        value = self._read(out, given)
        return value if isinstance(value, Tracer) else np.asarray(value, dtype=out.aval.dtype)

    def _read(self, atom: Atom, given: dict[str, Any]) -> Any:
        if isinstance(atom, Lit):
            return _lit_value(atom)
        return given[atom.name] if atom.name in given else self.env[atom.name]

    def _needed(self, target: Atom, given: dict[str, Any]) -> tuple[list[int], set[str]]:
        """The eqns (in order) that compute `target` from what is known, and the inputs and
        constants they read."""
        needed: set[int] = set()
        touched: set[str] = set()
        todo = [target]
        while todo:
            atom = todo.pop()
            if isinstance(atom, Lit) or atom.name in self.env:
                continue
            if atom.name in given:
                touched.add(atom.name)
                continue
            k = self.made[atom.name]
            if k not in needed:
                needed.add(k)
                todo.extend(self.eqns[k].ins)
        return sorted(needed), touched


def inline(tape: Tape, args: Sequence[Any]) -> list[Any]:
    """Apply the tape to `args` by binding its ops: records into the current trace. The first
    inlined reverse sweep marks the trace's `reverse_start` (so `make_tape(grad(f))` shows it)."""
    trace, count = current_trace(), iter(range(len(tape.eqns) + 1))

    def mark() -> None:
        if next(count) == tape.reverse_start and trace is not None \
                and trace.reverse_start is None:
            trace.reverse_start = len(trace.eqns)

    def apply(eqn: Eqn, ins: list[Any]) -> Any:
        mark()
        if OPS[eqn.op].kind is Kind.FUSED:      # its eqns, not the group: fuse again later
            return tuple(inline(eqn.kw["body"], ins))
        return _apply_bind(eqn, ins)

    # a Python scalar takes its input's dtype here: bound as is, it would take that of the
    # op's other operands (a float trip-count partner of a loop would become an integer)
    args = [np.asarray(a, v.aval.dtype) if isinstance(a, _SCALARS) else a
            for a, v in zip(args, tape.invars)]
    outs = evaluate(tape, args, apply)
    mark()  # an empty reverse sweep
    return outs


def largest(tape: Tape) -> int:
    """The size in bytes of the largest array an eqn of `tape` or of its sub-tapes makes."""
    sizes = [_nbytes(*out.aval) for eqn in tape.eqns if OPS[eqn.op].kind != Kind.FUSED
             for out in eqn.outs]
    return max(sizes + [largest(body) for eqn in tape.eqns for _, body in sub_tapes(eqn)],
               default=0)


def makers(tape: Tape, nbytes: int) -> tuple[tuple[str, Any, str], ...]:
    """The eqns of `tape` and its sub-tapes (a fused group's, not the group) whose outputs
    include an array of `nbytes` bytes (negative: 2**63 or more), as (op, user's line, `a
    float64 array of shape (3, 4)`), each once, in order: what a compiled program's
    allocation of that size was for."""
    found: dict[tuple, None] = {}
    for eqn in tape.eqns:
        for out in eqn.outs if OPS[eqn.op].kind != Kind.FUSED else ():
            size = _nbytes(*out.aval)
            if size == nbytes or nbytes < 0 and size >= 1 << 63:
                found.setdefault((eqn.op, eqn.src, _array(*out.aval)))
        for _, body in sub_tapes(eqn):
            found.update(dict.fromkeys(makers(body, nbytes)))
    return tuple(found)
