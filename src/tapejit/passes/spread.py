"""Broadcasts of cheap arithmetic broadcast its operands instead: `broadcast(x - m)` becomes
`broadcast(x) - broadcast(m)` when x and m are inputs, literals or views of inputs.

A broadcast reads its operand from memory (codegen/plan.py), so a loop nest that reads a value
it computes along another axis (a contraction written as a loop by contract.py, reading GMM's
`xc = x - mu` along the contracted axis) must store that value whole and split in two. With
the broadcast moved onto the operands, the nest recomputes one subtraction per read instead
(GMM: a (10000, 25, 10) array less written and read, one loop nest where there were two)."""
from __future__ import annotations

from ..avals import Aval
from ..ir import Atom, Eqn, Lit, Tape, Var, make_params
from ..ops import elementwise as E
from ..ops import layout as L
from ..ops import OPS, Kind
from .rewrite import expand, fresh_names

CHEAP = frozenset(op.name for op in (E.neg, E.add, E.sub, E.mul, E.convert))  # 1 instruction


def spread_broadcasts(tape: Tape) -> Tape:
    """Rewrite each broadcast of a cheap arithmetic eqn on free operands (see module doc)."""
    producers: dict[str, Eqn] = {}
    fresh = fresh_names(tape, "_b")

    def free(atom: Atom) -> bool:
        """A literal scalar, an input, or a view of free values: readable anywhere."""
        if isinstance(atom, Lit):
            return atom.aval.ndim == 0
        producer = producers.get(atom.name)
        return producer is None or (OPS[producer.op].kind is Kind.LAYOUT
                                    and all(free(a) for a in producer.ins))

    def rewrite(eqn: Eqn) -> list[Eqn] | None:
        inner = (producers.get(eqn.ins[0].name)
                 if eqn.op == L.broadcast_in_dim.name and isinstance(eqn.ins[0], Var) else None)
        if inner is None or inner.op not in CHEAP or not inner.outs[0].aval.ndim \
                or not all(free(a) for a in inner.ins):     # (a splat of a scalar stays one)
            producers.update((o.name, eqn) for o in eqn.outs)
            return None
        shape, dims = eqn.kw["shape"], eqn.kw["dims"]
        rank = inner.outs[0].aval.ndim
        eqns: list[Eqn] = []
        operands: list[Atom] = []
        for a in inner.ins:      # numpy broadcasting: a's axes are the trailing ones
            if isinstance(a, Lit):
                operands.append(a)
                continue
            b = Var(fresh(a.name), Aval(shape, a.aval.dtype))
            eqns.append(Eqn(L.broadcast_in_dim.name, (a,), (b,), make_params(
                {"shape": shape, "dims": dims[rank - a.aval.ndim:]}), eqn.src))
            operands.append(b)
        eqns.append(Eqn(inner.op, tuple(operands), eqn.outs, inner.params, eqn.src))
        producers.update((o.name, eqns[-1]) for o in eqn.outs)
        return eqns

    return expand(tape, rewrite)
