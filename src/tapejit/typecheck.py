"""`typecheck`: whether a tape keeps the IR's invariants (ir.py's docstring), each violation an
IRError naming the eqn. It reads the ops' shape rules, so it sits above the op table."""
from __future__ import annotations

import numpy as np

from .avals import Aval
from .errors import IRError
from .ir import Atom, Lit, Tape, Var, print_eqn, sub_tapes
from .ops import OPS


def typecheck(tape: Tape) -> None:
    """Raise IRError unless the tape satisfies the invariants in this module's docstring."""
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
