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

Invariants (checked by typecheck.py): every var is defined exactly once before it is read; each
eqn's output avals are what its op's shape rule gives for its inputs; names are unique. An eqn
has one output, except ops with `multiple_results`. A param may be a tape (a
"sub-tape": a loop body, a branch, a fused group); a sub-tape is closed (it reads only its own
inputs), has no constants, and is typechecked with its eqn.
Inputs keep the user's parameter names, intermediates are `v1, v2, ...`, constants `c1, ...`
and cotangents `ct_<name>`. `print_tape` writes the text form; parse.py reads it back.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple, Union

import numpy as np

from .avals import Aval


class Var(NamedTuple):
    """A named SSA value. (Var and Eqn are NamedTuples rather than frozen dataclasses: tracing
    creates them per recorded op, and tuples are several times cheaper to build.)"""

    name: str
    aval: Aval

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Lit:
    """A literal operand: a Python scalar of its aval's dtype, written into the tape."""
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
    """A program: its inputs, its eqns in order, its outputs and its constants (vars and
    values)."""
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
        return print_tape(self)


# the ops run for an effect (`check`: a failed check is an error), registered by ops/: dce keeps
# their eqns, and the eqns whose sub-tapes hold one, though nothing reads their outputs
EFFECTS: set[str] = set()


def has_effect(eqn: Eqn) -> bool:
    """Whether `eqn` is, or its sub-tapes hold, an eqn of an op in `EFFECTS`."""
    return eqn.op in EFFECTS or any(has_effect(e) for _, body in sub_tapes(eqn)
                                    for e in body.eqns)


def dce(tape: Tape) -> Tape:
    """Dead-code elimination: drop eqns whose outputs nothing reads (but those with an effect),
    and constants no eqn reads (the `dce` pass; reverse mode and tracing use it too)."""
    live = {o.name for o in tape.outvars if isinstance(o, Var)}
    keep = [False] * len(tape.eqns)
    for i in range(len(tape.eqns) - 1, -1, -1):
        eqn = tape.eqns[i]
        if (eqn.outs[0].name in live or any(o.name in live for o in eqn.outs[1:])
                or has_effect(eqn)):
            keep[i] = True
            for a in eqn.ins:
                if type(a) is Var:
                    live.add(a.name)
    eqns = tuple(e for e, k in zip(tape.eqns, keep) if k)
    consts = [(v, c) for v, c in zip(tape.constvars, tape.consts) if v.name in live]
    reverse_start = None
    if tape.reverse_start is not None:
        reverse_start = sum(keep[:tape.reverse_start])
    return Tape(tape.invars, eqns, tape.outvars,
                tuple(v for v, _ in consts), tuple(c for _, c in consts), reverse_start)


# ---- the text form (parse.py reads it back) ----------------------------------------------------
_INDENT = "      "


def _binder(v: Var) -> str:
    return f"{v.name}:{v.aval}"


def _params(eqn: Eqn) -> str:
    if not eqn.params:
        return ""
    return "[" + ", ".join(f"{k}={'...' if isinstance(v, Tape) else repr(v)}"
                           for k, v in eqn.params) + "]"


def print_eqn(eqn: Eqn, show_src: bool = False) -> str:
    text = " ".join([*map(_binder, eqn.outs), "=", eqn.op + _params(eqn), *map(str, eqn.ins)])
    if show_src and eqn.src is not None:
        text += f"  # {os.path.basename(eqn.src[0])}:{eqn.src[1]}"
    return text


def print_tape(tape: Tape, show_src: bool = True) -> str:
    head = " ".join(["{ lambda", *map(_binder, tape.invars)])
    if tape.constvars:
        head += " ; " + " ".join(map(_binder, tape.constvars))
    lines = [head + " ."]
    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            lines.append(("  let " if i == 0 else _INDENT) + "# reverse")
        prefix = "  let " if len(lines) == 1 else _INDENT
        lines.append(prefix + print_eqn(eqn, show_src))
        for key, body in sub_tapes(eqn):
            nested = print_tape(body, show_src).splitlines()
            lines.append(f"{_INDENT}  {key} = {nested[0]}")
            lines.extend(f"{_INDENT}  {' ' * len(key)}   {line}" for line in nested[1:])
    if tape.reverse_start is not None and tape.reverse_start == len(tape.eqns):
        lines.append(("  let " if len(lines) == 1 else _INDENT) + "# reverse")  # empty sweep
    if len(lines) == 1:
        lines.append("  let")
    lines.append("  in ( " + ", ".join(map(str, tape.outvars)) + " ) }")
    return "\n".join(lines)
