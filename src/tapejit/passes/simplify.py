"""Algebraic simplification and constant folding, as a table of rewrites.

Each rule looks at one eqn (with its literal inputs; an array that is a broadcast literal, a
"splat", is shown to the rules as that literal) and may return an existing atom that computes
the same value with the same aval; the eqn then disappears and its readers use that atom.
Eqns whose inputs are all literals and whose result is a scalar are evaluated (folded). The
rules name their ops through the op objects (ops/), never by string.
Rewrites that change values at special points are deliberately absent: `x * 0 -> 0` (NaN and
inf times 0 are NaN), `exp(log x) -> x` (NaN for x < 0), `log(exp x) -> x` (inf for large x).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..ir import Atom, Eqn, Lit, Tape, Var, make_params
from ..ops import elementwise as E
from ..ops import layout as L
from ..ops import OPS
from .rewrite import forward_rewrite


def _is(atom: Atom, value: Any) -> bool:
    """Whether `atom` is the literal `value` (bools and numbers kept apart)."""
    if not isinstance(atom, Lit):
        return False
    if isinstance(value, bool):
        return atom.value is value
    return not isinstance(atom.value, bool) and atom.value == value


def _same(atom: Atom, eqn: Eqn) -> Atom | None:
    """`atom` if it can stand for the eqn's output (same shape and dtype), else None."""
    return atom if atom.aval == eqn.outs[0].aval else None


Rule = Callable[..., "Atom | None"]

RULES: dict[str, Rule] = {
    E.add.name: lambda e, a, b: _same(a, e) if _is(b, 0) else _same(b, e) if _is(a, 0) else None,
    E.sub.name: lambda e, a, b: _same(a, e) if _is(b, 0) else None,                  # x - 0 -> x
    E.mul.name: lambda e, a, b: _same(a, e) if _is(b, 1) else _same(b, e) if _is(a, 1) else None,
    E.div.name: lambda e, a, b: _same(a, e) if _is(b, 1) else None,                  # x / 1 -> x
    E.pow_.name: lambda e, a, b: _same(a, e) if _is(b, 1) else None,                  # x ** 1 -> x
    # select on a literal condition picks a branch
    E.select.name: lambda e, p, a, b: (_same(a, e) if _is(p, True) else
                                  _same(b, e) if _is(p, False) else None),
    # layout ops that do nothing: same shape broadcast, reshape, identity transpose, convert
    L.broadcast_in_dim.name: lambda e, x: _same(x, e),
    L.reshape.name: lambda e, x: _same(x, e),
    L.transpose.name: lambda e, x: (_same(x, e) if e.kw["perm"] == tuple(range(x.aval.ndim))
                                    else None),
    E.convert.name: lambda e, x: _same(x, e),
}


def _fold(eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """Evaluate a scalar eqn on literal inputs."""
    if eqn.outs[0].aval.shape != () or not ins or not all(isinstance(a, Lit) for a in ins) \
            or OPS[eqn.op].multiple_results:
        return None   # (an op without inputs, like dim_size, must stay: it reads run-time sizes)
    with np.errstate(all="ignore"):
        value = OPS[eqn.op].impl(*(a.aval.dtype.type(a.value) for a in ins), **eqn.kw)
    return Lit(eqn.outs[0].aval.dtype.type(value).item(), eqn.outs[0].aval)


def _twice(eqn: Eqn, ins: list[Atom], producers: dict[str, Eqn]) -> Eqn | None:
    """The eqn producing `eqn`'s operand when it is the same op: op(op(x))."""
    inner = producers.get(ins[0].name) if ins and isinstance(ins[0], Var) else None
    return inner if inner is not None and inner.op == eqn.op else None


_INVOLUTIONS = (E.neg.name, L.transpose.name, L.reshape.name)


def _op_of_op(eqn: Eqn, ins: list[Atom], producers: dict[str, Eqn]) -> Atom | Eqn | None:
    """neg(neg(x)) -> x; transpose(transpose(x)) and reshape(reshape(x)) -> x, or one
    transpose (reshape) of x."""
    inner = _twice(eqn, ins, producers) if eqn.op in _INVOLUTIONS else None
    if inner is None:
        return None
    if eqn.op == E.neg.name:
        return inner.ins[0]
    if eqn.op == L.reshape.name:
        return _same(inner.ins[0], eqn) or Eqn(L.reshape.name, inner.ins, eqn.outs, eqn.params,
                                                eqn.src)
    perm = tuple(inner.kw["perm"][p] for p in eqn.kw["perm"])
    if perm == tuple(range(len(perm))):
        return _same(inner.ins[0], eqn)
    return Eqn(L.transpose.name, inner.ins, eqn.outs, make_params({"perm": perm}), eqn.src)


def simplify(tape: Tape) -> Tape:
    """Apply the rewrite table and constant folding in one forward walk."""
    producers: dict[str, Eqn] = {}
    splats: dict[str, Lit] = {}   # arrays that are a literal broadcast (x * ones -> x)
    reciprocals: dict[str, Var] = {}  # b -> the var holding 1 / b

    def decide(eqn: Eqn) -> Atom | Eqn | None:
        ins = list(eqn.ins)
        seen = [splats.get(a.name, a) if isinstance(a, Var) else a for a in ins]
        rule = RULES.get(eqn.op)
        replacement = _fold(eqn, ins) or (rule(eqn, *seen) if rule else None)
        composed = None
        if replacement is None:
            replacement = _op_of_op(eqn, ins, producers)
            if isinstance(replacement, Eqn):
                eqn = composed = replacement
                replacement = None
        if replacement is None:
            out = eqn.outs[0]
            producers[out.name] = eqn
            if eqn.op == L.broadcast_in_dim.name and isinstance(seen[0], Lit):
                splats[out.name] = seen[0]
            if eqn.op == E.div.name and _is(seen[0], 1) and isinstance(ins[1], Var) \
                    and out.aval == ins[1].aval:
                reciprocals[ins[1].name] = out
            elif eqn.op == E.div.name and isinstance(ins[1], Var) and ins[1].name in reciprocals:
                # a / b with 1 / b at hand: one multiplication instead of another division
                return Eqn(E.mul.name, (ins[0], reciprocals[ins[1].name]), eqn.outs, (), eqn.src)
            return composed
        return replacement

    return forward_rewrite(tape, decide)
