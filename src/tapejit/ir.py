"""The IR: a frozen SSA tape of primitive equations on static shapes and dtypes.

Glossary (one vocabulary across tapejit):
  tape      a `Tape`: input vars, constant vars (with their arrays), equations, output atoms
  eqn       one `Eqn`: `outs = op[params] ins`, with the user's source line that produced it
  var       a `Var`: a named SSA value with an aval; defined once, as an input or an eqn output
  lit       a `Lit`: a scalar literal with an aval of shape ()
  atom      a var or a lit: what an eqn reads
  aval      an `Aval`: shape and dtype (see avals.py)
  op        a primitive from the op table (ops/); an eqn names it
  ct        a cotangent: the gradient flowing backwards through the reverse sweep
  residual  a forward value that the reverse sweep reads

Invariants (checked by `typecheck`): every var is defined exactly once before it is read; each
eqn's output avals are what its op's shape rule gives for its inputs; names are unique.
Inputs keep the user's parameter names, intermediates are `v1, v2, ...`, constants `c1, ...`
and cotangents `ct_<name>`. The text form is in printer.py.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Union

import numpy as np

from .avals import Aval
from .errors import IRError
from .ops import OPS


@dataclasses.dataclass(frozen=True, slots=True)
class Var:
    name: str
    aval: Aval

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Lit:
    value: Any  # a Python scalar: bool, int or float
    aval: Aval

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Lit) and self.aval == other.aval
                and repr(self.value) == repr(other.value))

    def __hash__(self) -> int:
        return hash((repr(self.value), self.aval))

    def __str__(self) -> str:
        return f"{self.value!r}:{self.aval}"


Atom = Union[Var, Lit]
Params = tuple[tuple[str, Any], ...]
Src = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Eqn:
    op: str
    ins: tuple[Atom, ...]
    outs: tuple[Var, ...]
    params: Params
    src: Src | None = dataclasses.field(default=None, compare=False)

    @property
    def kw(self) -> dict[str, Any]:
        """The params as keyword arguments for the op's rules."""
        return dict(self.params)


def make_params(params: dict[str, Any]) -> Params:
    return tuple(sorted(params.items()))


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Tape:
    invars: tuple[Var, ...]
    eqns: tuple[Eqn, ...]
    outvars: tuple[Atom, ...]
    constvars: tuple[Var, ...] = ()
    consts: tuple[np.ndarray, ...] = ()
    reverse_start: int | None = None  # index of the first eqn of the reverse sweep, if any

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Tape) and self._structure() == other._structure()
                and all(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                        for a, b in zip(self.consts, other.consts)))

    def __hash__(self) -> int:
        return hash(self._structure())

    def _structure(self) -> tuple:
        return (self.invars, self.constvars, self.eqns, self.outvars, self.reverse_start)

    def __str__(self) -> str:
        from .printer import print_tape
        return print_tape(self)


def typecheck(tape: Tape) -> None:
    """Raise IRError unless the tape satisfies the invariants in this module's docstring."""
    defined: dict[str, Aval] = {}

    def define(var: Var, where: str) -> None:
        if var.name in defined:
            raise IRError(f"{where}: {var.name} is defined twice")
        defined[var.name] = var.aval

    def read(atom: Atom, where: str) -> None:
        if isinstance(atom, Var) and defined.get(atom.name) != atom.aval:
            raise IRError(f"{where}: {atom.name}:{atom.aval} is read before it is defined "
                          f"(or with another aval)")
        if isinstance(atom, Lit) and atom.aval.shape != ():
            raise IRError(f"{where}: literal {atom} is not a scalar")

    for v in tape.invars + tape.constvars:
        define(v, "inputs")
    for c, v in zip(tape.consts, tape.constvars):
        if Aval(tuple(np.shape(c)), np.asarray(c).dtype) != v.aval:
            raise IRError(f"constant {v.name}:{v.aval} holds an array of another aval")
    for eqn in tape.eqns:
        from .printer import print_eqn
        where = f"eqn `{print_eqn(eqn)}`"
        if eqn.op not in OPS:
            raise IRError(f"{where}: unknown op {eqn.op}")
        for atom in eqn.ins:
            read(atom, where)
        try:
            expected = OPS[eqn.op].shape(*(a.aval for a in eqn.ins), **eqn.kw)
        except Exception as err:
            raise IRError(f"{where}: {err}") from None
        if len(eqn.outs) != 1 or eqn.outs[0].aval != expected:
            raise IRError(f"{where}: output should be {expected}")
        for var in eqn.outs:
            define(var, where)
    for atom in tape.outvars:
        read(atom, "outputs")
