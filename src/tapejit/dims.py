"""Axis symbols: which axes of a tape's values are one axis, by the structure of the tape.

Every axis of a tape's inputs and constants starts as its own symbol. Each eqn ties the axes
its op forces to be one (the op record's `axes` rule, ops/axes.py); an output axis no rule
ties is a new symbol. Two axes of equal length that nothing ties stay two symbols: a
(3,) vector and the rows of a (3, 3) matrix are not the same axis because their lengths agree.
Fusion and code generation compare axes by symbol, never by length, and the generated source
reads one run-time size per symbol, so a program traced with a batch of 32 and a width of 32
serves a batch of 64 too.

A `fused` eqn's body shares its tape's names (fusion keeps them), so it is analysed in place;
the bodies of control flow are sub-tapes of their own, analysed with fresh symbols for their
inputs (`Dims.scope`). Axes of length 1 are broadcast, never tied.
"""
from __future__ import annotations

from typing import NamedTuple

from .ir import Atom, Lit, Tape, sub_tapes
from .ops import OPS, Kind
from .ops.axes import OUT


class Dim(NamedTuple):
    """One axis of a value: its symbol (the representative of its class) and its length."""

    sym: int
    size: int


class Dims:
    """The axis symbols of every value of a tape and of its sub-tapes."""

    def __init__(self, tape: Tape) -> None:
        self._parent: list[int] = []
        self._size: list[int] = []
        self._scopes: dict[Tape, dict[str, list[int]]] = {}
        # by the id of a scope's names: fused and segment bodies share their tape's
        self._resolved: dict[int, dict[str, tuple[Dim, ...]]] = {}
        self.root = tape
        self._analyse(tape, {})

    def scope(self, tape: Tape) -> dict[str, tuple[Dim, ...]]:
        """The dims of the values of `tape` (the analysed tape or one of its sub-tapes), by
        name."""
        self._analyse(tape, {})         # a sub-tape made after the analysis: fresh symbols
        names = self._scopes[tape]
        if id(names) not in self._resolved:
            self._resolved[id(names)] = {
                name: tuple(Dim(self._find(s), self._size[s]) for s in syms)
                for name, syms in names.items()}
        return self._resolved[id(names)]

    def length(self, sym: int) -> int:
        return self._size[sym]

    def _new(self, size: int) -> int:
        self._parent.append(len(self._parent))
        self._size.append(size)
        return len(self._parent) - 1

    def _find(self, s: int) -> int:
        while self._parent[s] != s:
            self._parent[s] = self._parent[self._parent[s]]
            s = self._parent[s]
        return s

    def _tie(self, a: int, b: int) -> None:
        ra, rb = self._find(a), self._find(b)
        assert self._size[ra] == self._size[rb], "an axis rule tied axes of different lengths"
        self._parent[max(ra, rb)] = min(ra, rb)

    def _analyse(self, tape: Tape, names: dict[str, list[int]]) -> None:
        if tape in self._scopes:
            return
        self._scopes[tape] = names
        for var in tape.invars + tape.constvars:
            names.setdefault(var.name, [self._new(n) for n in var.aval.shape])
        self._eqns(tape, names)

    def _eqns(self, tape: Tape, names: dict[str, list[int]]) -> None:
        for eqn in tape.eqns:
            op = OPS[eqn.op]
            if op.kind in (Kind.FUSED, Kind.SEGMENT):     # the body's names are the tape's
                self._eqns(eqn.kw["body"], names)
                self._scopes.setdefault(eqn.kw["body"], names)
                continue
            for _, body in sub_tapes(eqn):
                self._analyse(body, {})
            ins = [self._of(a, names) for a in eqn.ins]
            outs = [[self._new(n) for n in o.aval.shape] for o in eqn.outs]
            if not op.multiple_results:
                shapes = tuple(a.aval.shape for a in eqn.ins)
                for group in op.axes(shapes, eqn.outs[0].aval.shape, **eqn.kw):
                    self._tie_group([outs[0][a] if k == OUT else ins[k][a] for k, a in group])
            for o, syms in zip(eqn.outs, outs):
                names[o.name] = syms

    def _of(self, atom: Atom, names: dict[str, list[int]]) -> list[int]:
        return [] if isinstance(atom, Lit) else names[atom.name]

    def _tie_group(self, syms: list[int]) -> None:
        syms = [s for s in syms if self._size[s] != 1]
        for s in syms[1:]:
            self._tie(syms[0], s)
