"""Per-step values as one stacked array: the `xs` a re-rolled scan reads (reroll.py), and the
ys a loop's steps appended to a list that `np.concatenate` / `np.stack` joins after it.

A sequence of per-step values becomes a `(steps, *shape)` array made once, before the scan:
- literals, or constant arrays (the rows of a numpy data array a loop walks over): a new
  constant, their values stacked;
- slices of one array (`xs[t]` for a Python int `t`, a column `log_b[:, y]` for data `y`, the
  rows taken out of an earlier scan's ys), reshaped or not: each value's elements are known
  positions of the array, so the stack is a slice of the array's flat elements where those
  are consecutive (the rows in order), else one `take` of those positions.
`joined_rows` rewrites a `concatenate` of rows of a scan's ys (in any order) the same way: a
list of per-step results joined after a re-rolled loop is its ys, not one slice per step.
In the layers: with control flow, between repeats.py and reroll.py.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..avals import Aval
from ..ir import Atom, Eqn, Lit, Tape, Var, dce, make_params
from ..ops import index as X
from ..ops import layout as L
from ..passes.rewrite import fresh_names
from . import primitives as C
from .repeats import MIN_STEPS, Index

I64 = np.dtype(np.int64)


def positions(cut: Eqn, shape: tuple[int, ...]) -> np.ndarray:
    """The flat positions in its operand of the elements that slice eqn `cut` takes, in the
    C order of its output reshaped to `shape`."""
    dims = cut.ins[0].aval.shape
    strides = np.cumprod((*dims[1:], 1)[::-1])[::-1]
    kw = cut.kw
    axes = [np.arange(lo, hi, st) * stride
            for lo, hi, st, stride in zip(kw["start"], kw["limit"], kw["step"], strides)]
    return sum(np.ix_(*axes), np.zeros((), np.int64)).reshape(shape)


class Stacks:
    """The stacked operands one rewrite adds: new constants (`constvars`, `consts`) and the
    eqns that make the others (`eqns`, taken by the scan that first reads them), each made
    once."""

    def __init__(self, index: Index, fresh: Any) -> None:
        self.index, self.fresh = index, fresh
        self.made: dict[Any, Var] = {}
        self.constvars: list[Var] = []
        self.consts: list[np.ndarray] = []
        self.eqns: list[Eqn] = []

    def take_eqns(self) -> list[Eqn]:
        eqns, self.eqns = self.eqns, []
        return eqns

    def of(self, values: Sequence[Atom], src: Any) -> Var:
        """The values stacked: all literals, all constants or all slices of one array."""
        aval = values[0].aval
        if all(type(v) is Lit for v in values):
            return self.constant(np.array([v.value for v in values], aval.dtype))
        if all(v.name in self.index.const_values for v in values):
            return self.constant(np.stack([self.index.const_values[v.name] for v in values]))
        cuts = [self.index.slice_of(v) for v in values]
        array = cuts[0].ins[0]
        return self.rows(array, np.stack([positions(c, aval.shape) for c in cuts]), src)

    def constant(self, value: np.ndarray) -> Var:
        key = ("const", value.dtype.str, value.shape, value.tobytes())
        if key not in self.made:
            self.made[key] = Var(self.fresh("steps"), Aval(value.shape, value.dtype))
            self.constvars.append(self.made[key])
            self.consts.append(value)
        return self.made[key]

    def rows(self, array: Var, at: np.ndarray, src: Any) -> Var:
        """The elements of `array` at flat positions `at`, shaped as `at`."""
        key = ("rows", array.name, at.shape, at.tobytes())
        if key in self.made:
            return self.made[key]
        flat = at.ravel()
        start = int(flat[0]) if flat.size else 0
        in_order = np.array_equal(flat, np.arange(start, start + flat.size))
        if in_order and array.aval.shape == at.shape:
            return array
        dtype, size = array.aval.dtype, array.aval.size
        line = array if array.aval.ndim == 1 else self.emit(
            L.reshape.name, (array,), (size,), dtype, src, shape=(size,))
        if not in_order:
            made = self.emit(X.take.name, (line, self.constant(at.astype(I64))), at.shape,
                              dtype, src, axis=0)
        else:
            if flat.size != size:
                line = self.emit(L.slice_.name, (line,), (flat.size,), dtype, src,
                                  start=(start,), limit=(start + flat.size,), step=(1,))
            made = self.emit(L.reshape.name, (line,), at.shape, dtype, src, shape=at.shape)
        self.made[key] = made
        return made

    def emit(self, op: str, ins: tuple[Atom, ...], out_shape: tuple[int, ...],
             dtype: np.dtype, src: Any, **params: Any) -> Var:
        out = Var(self.fresh("steps"), Aval(tuple(out_shape), dtype))
        self.eqns.append(Eqn(op, ins, (out,), make_params(params), src))
        return out


def joined_rows(tape: Tape) -> Tape:
    """`tape` with each run of MIN_STEPS or more equal-shaped slices of one scan's output (the
    rows `reroll` took out of its ys) among a `concatenate`'s inputs made from that output at
    once."""
    index = Index(tape)
    scanned = {o.name for e in tape.eqns if e.op == C.scan.name for o in e.outs}
    stacks = Stacks(index, fresh_names(tape, "_"))
    eqns, changed, reverse_start = [], False, None
    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            reverse_start = len(eqns)
        made = _joined(eqn, index, stacks, scanned) if eqn.op == L.concatenate.name else None
        eqns += made if made is not None else [eqn]
        changed |= made is not None
    if not changed:
        return tape
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    return dce(Tape(tape.invars, tuple(eqns), tape.outvars,
                    tape.constvars + tuple(stacks.constvars),
                    tape.consts + tuple(stacks.consts), reverse_start))


def _joined(eqn: Eqn, index: Index, stacks: Stacks, scanned: set[str]) -> list[Eqn] | None:
    """The eqns making concatenate `eqn` with its runs of rows of a scan output joined."""
    groups: list[tuple[Any, list[Atom]]] = []      # (array, shape) or None, the inputs
    for a in eqn.ins:
        cut = index.slice_of(a) if type(a) is Var else None
        key = (cut.ins[0], a.aval.shape) if cut is not None and \
            cut.ins[0].name in scanned else None
        if key is not None and groups and groups[-1][0] == key:
            groups[-1][1].append(a)
        else:
            groups.append((key, [a]))
    ins: list[Atom] = []
    for key, members in groups:
        if key is None or len(members) < MIN_STEPS:
            ins += members
        else:
            ins.append(_rows_joined(key[0], members, eqn, index, stacks))
    if len(ins) == len(eqn.ins):
        return None
    last = (Eqn(eqn.op, tuple(ins), eqn.outs, eqn.params, eqn.src) if len(ins) > 1 else
            Eqn(L.reshape.name, tuple(ins), eqn.outs,
                make_params(dict(shape=eqn.outs[0].aval.shape)), eqn.src))
    return [*stacks.take_eqns(), last]


def _rows_joined(array: Var, members: list[Var], eqn: Eqn, index: Index,
                 stacks: Stacks) -> Var:
    """`members` (slices of `array`, of one shape) concatenated along `eqn`'s axis."""
    shape, axis, dtype = members[0].aval.shape, eqn.kw["axis"], array.aval.dtype
    at = np.stack([positions(index.slice_of(m), shape) for m in members])
    stacked = stacks.rows(array, at, eqn.src)                 # (pieces, *shape)
    if axis:
        perm = (*range(1, axis + 1), 0, *range(axis + 1, len(shape) + 1))
        moved = (*shape[:axis], len(members), *shape[axis:])
        stacked = stacks.emit(L.transpose.name, (stacked,), moved, dtype, eqn.src, perm=perm)
    joined = (*shape[:axis], len(members) * shape[axis], *shape[axis + 1:])
    return stacks.emit(L.reshape.name, (stacked,), joined, dtype, eqn.src, shape=joined)
