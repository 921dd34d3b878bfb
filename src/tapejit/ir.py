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
eqn's output avals are what its op's shape rule gives for its inputs; names are unique. An eqn
has one output, except ops with `multiple_results`. A param may be a tape (a
"sub-tape": a loop body, a branch, a fused group); a sub-tape is closed (it reads only its own
inputs), has no constants, and is typechecked with its eqn.
Inputs keep the user's parameter names, intermediates are `v1, v2, ...`, constants `c1, ...`
and cotangents `ct_<name>`. The text form is in printer.py.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Union

import numpy as np

from .avals import Aval
from .errors import IRError
from .ops import OPS


class Var(NamedTuple):
    """A named SSA value. (Var and Eqn are NamedTuples rather than frozen dataclasses: tracing
    creates them per recorded op, and tuples are several times cheaper to build.)"""

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


class Eqn(NamedTuple):
    """`outs = op[params] ins`; `src` (the user's line) is not part of its identity."""

    op: str
    ins: tuple[Atom, ...]
    outs: tuple[Var, ...]
    params: Params
    src: Src | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Eqn) and self[:4] == other[:4]

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self[:4])

    @property
    def kw(self) -> dict[str, Any]:
        """The params as keyword arguments for the op's rules."""
        return dict(self.params)


def make_params(params: dict[str, Any]) -> Params:
    return tuple(sorted(params.items()))


def sub_tapes(eqn: Eqn) -> list[tuple[str, "Tape"]]:
    """The eqn's params that are tapes (the bodies of control flow and of fused groups)."""
    return [(k, v) for k, v in eqn.params if isinstance(v, Tape)]


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
    from .printer import print_eqn
    defined: dict[str, Aval] = {}

    def define(var: Var, where: str) -> None:
        if not isinstance(var, Var):
            raise IRError(f"{where}: {var} is bound, but only a var can be")
        if var.name in defined:
            raise IRError(f"{where}: {var.name} is defined twice")
        defined[var.name] = var.aval

    def read(atom: Atom, where: str) -> None:
        if isinstance(atom, Lit):
            _check_lit(atom, where)
        elif not isinstance(atom, Var):
            raise IRError(f"{where}: {atom!r} is neither a var nor a literal")
        elif atom.name not in defined:
            raise IRError(f"{where}: {atom.name} is read before it is defined")
        elif defined[atom.name] != atom.aval:
            raise IRError(f"{where}: {atom.name} is read as {atom.aval} but defined as "
                          f"{defined[atom.name]}")

    for v in tape.invars + tape.constvars:
        define(v, "inputs")
    if len(tape.consts) != len(tape.constvars):
        raise IRError(f"the tape has {len(tape.constvars)} constant vars but "
                      f"{len(tape.consts)} constant arrays")
    for c, v in zip(tape.consts, tape.constvars):
        held = Aval(tuple(np.shape(c)), np.asarray(c).dtype)
        if held != v.aval:
            raise IRError(f"constant {v.name}:{v.aval} holds an array of aval {held}")
    if tape.reverse_start is not None and not 0 <= tape.reverse_start <= len(tape.eqns):
        raise IRError(f"reverse_start {tape.reverse_start} is outside the tape's "
                      f"{len(tape.eqns)} eqns")
    for eqn in tape.eqns:
        where = f"eqn `{print_eqn(eqn)}`"
        if eqn.op not in OPS:
            raise IRError(f"{where}: unknown op {eqn.op}")
        for atom in eqn.ins:
            read(atom, where)
        for key, body in sub_tapes(eqn):
            try:
                typecheck(body)
            except IRError as err:
                raise IRError(f"{where}: sub-tape {key}: {err}") from None
        try:
            expected = OPS[eqn.op].shape(*(a.aval for a in eqn.ins), **eqn.kw)
        except Exception as err:
            raise IRError(f"{where}: {err}") from None
        got = tuple(o.aval for o in eqn.outs)
        if OPS[eqn.op].multiple_results:
            if got != tuple(expected):
                raise IRError(f"{where}: outputs should be {' '.join(map(str, expected))}, "
                              f"not {' '.join(map(str, got))}")
        elif len(got) != 1:
            raise IRError(f"{where}: an eqn has exactly one output, not {len(got)}")
        elif got[0] != expected:
            raise IRError(f"{where}: output should be {expected}, not {got[0]}")
        for var in eqn.outs:
            define(var, where)
    for atom in tape.outvars:
        read(atom, "outputs")


_LIT_TYPES = {"b": (bool,), "i": (int,), "u": (int,), "f": (float,)}


def _check_lit(lit: Lit, where: str) -> None:
    """A literal is a Python scalar of its dtype's kind, exactly representable in it."""
    if lit.aval.shape != ():
        raise IRError(f"{where}: literal {lit} is not a scalar")
    kinds = _LIT_TYPES.get(lit.aval.dtype.kind, ())
    if type(lit.value) not in kinds:
        raise IRError(f"{where}: literal {lit} holds a {type(lit.value).__name__}; a "
                      f"{lit.aval.dtype} literal holds a Python {kinds[0].__name__}"
                      if kinds else f"{where}: literal {lit} has an unsupported dtype")
    try:
        exact = repr(lit.aval.dtype.type(lit.value).item()) == repr(lit.value)
    except OverflowError:
        exact = False
    if not exact:
        raise IRError(f"{where}: literal {lit} is not exactly representable as "
                      f"{lit.aval.dtype}")
