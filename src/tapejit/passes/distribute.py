"""A matrix product of a difference of broadcasts, as a difference of products:
`dot(a, x[:, None, :] - mu[None])` (contracted over the points, batched over the components)
becomes `dot(a, x) - dot(sum(a), mu)`.

A term broadcast along a batch axis drops that batch axis: the other operand's batch axis
becomes one of its free axes, so the batched product of small matrices is one large BLAS
product (a GMM's covariance gradient: 25 products of 10 x 10000 by 10000 x 10, as a loop
accumulating 2,500 sums for each of 10,000 points, become one 250 x 10000 by 10000 x 10
product; its forward `Q_k (x_i - mu_k)`: 25 products of 10 x 10 by 10 x 10000, a loop of
25 million multiply-adds, become one 10000 x 10 by 10 x 250 product and 25 matrix-vector
products). A term broadcast along a contracted axis is constant there: the other operand is
summed over it first. A term broadcast along a free axis gives a product without that axis,
broadcast back by the difference. Products that keep their batch axes in every term are split
only when they contract more than `SMALL` elements; a short contraction stays the loop nest
contract.py makes of it."""
from __future__ import annotations

import math

from ..avals import Aval
from ..ir import Eqn, Tape, Var, make_params
from ..ops import elementwise as E
from ..ops import layout as L
from ..ops import linalg as LA
from .contract import SMALL
from .rewrite import expand, fresh_names


def split_products(tape: Tape) -> Tape:
    """Rewrite each long product one of whose operands is `add`/`sub` of broadcast terms."""
    producers = {o.name: e for e in tape.eqns for o in e.outs}
    fresh = fresh_names(tape, "_d")

    def rewrite(eqn: Eqn) -> list[Eqn] | None:
        side = _splittable(eqn, producers) if eqn.op == LA.dot_general.name else None
        if side is None:
            return None
        difference = producers[eqn.ins[side].name]
        eqns: list[Eqn] = []
        terms = [_product(eqn, side, term, producers, fresh, eqns) for term in difference.ins]
        return eqns + [Eqn(difference.op, tuple(terms), eqn.outs, (), eqn.src)]

    return expand(tape, rewrite)


def _axes(eqn: Eqn, side: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    return (lc, lb) if side == 0 else (rc, rb)


def _broadcast_axes(term: Var, operand: Var) -> tuple[int, ...]:
    """The axes of `operand` along which `term` (numpy-aligned to it) is broadcast."""
    shape = (1,) * (operand.aval.ndim - term.aval.ndim) + term.aval.shape
    return tuple(d for d, n in enumerate(shape) if n == 1 and operand.aval.shape[d] != 1)


def _splittable(eqn: Eqn, producers: dict[str, Eqn]) -> int | None:
    """The side whose operand is a difference (or sum) of terms, one of them broadcast at
    least, in a product that either contracts more than SMALL elements or has more than
    SMALL^2 results and loses a batch axis in some term's product; else None. (At most one
    term is whole: two whole terms would double the product's work.)"""
    for side in (0, 1):
        operand = eqn.ins[side]
        if not isinstance(operand, Var):
            continue
        difference = producers.get(operand.name)
        if difference is None or difference.op not in (E.add.name, E.sub.name) or \
                not all(isinstance(t, Var) for t in difference.ins):
            continue
        contract, batch = _axes(eqn, side)
        spans = [set(_broadcast_axes(t, operand)) for t in difference.ins]
        long = math.prod(operand.aval.shape[d] for d in contract) > SMALL
        unbatches = any(axes & set(batch) for axes in spans) and \
            math.prod(eqn.outs[0].aval.shape) > SMALL * SMALL     # not a tiny result
        if any(spans) and (long or unbatches):
            return side
    return None


def _product(eqn: Eqn, side: int, term: Var, producers: dict[str, Eqn], fresh,
             out: list[Eqn]) -> Var:
    """`eqn`'s product with `term` in place of operand `side` (out: the eqns computing it).
    The other operand is read through a transpose producing it (BLAS reads any axis order
    of a matrix; a transposed copy of a (10000, 25, 10) cotangent is 20 MB moved)."""
    operand, other = eqn.ins[side], eqn.ins[1 - side]
    contract, batch = _axes(eqn, side)
    o_contract, o_batch = _axes(eqn, 1 - side)
    base, axis = other, list(range(other.aval.ndim))     # other's axis a is base's axis[a]
    producer = producers.get(other.name) if isinstance(other, Var) else None
    if producer is not None and producer.op == L.transpose.name:
        base, axis = producer.ins[0], list(producer.kw["perm"])
    other_axis = {b: a for a, b in enumerate(axis)}
    dtype, src = eqn.outs[0].aval.dtype, eqn.src
    gone = _broadcast_axes(term, operand)

    def emit(op: str, x: Var, result: tuple[int, ...], **params) -> Var:
        v = Var(fresh(eqn.outs[0].name), Aval(result, dtype))
        out.append(Eqn(op, (x,), (v,), make_params(params), src))
        return v

    # the term without its broadcast axes
    aligned = (1,) * (operand.aval.ndim - term.aval.ndim) + term.aval.shape
    kept = [d for d in range(operand.aval.ndim) if d not in gone]
    t = term
    if tuple(aligned[d] for d in kept) != term.aval.shape:
        t = emit(L.reshape.name, term, tuple(aligned[d] for d in kept),
                 shape=tuple(aligned[d] for d in kept))
    # the other operand summed over the axes contracted with the term's broadcast ones
    summed = tuple(sorted(axis[o_contract[k]] for k, d in enumerate(contract) if d in gone))
    o = base
    if summed:
        o = emit(L.reduce_sum.name, base, tuple(n for d, n in enumerate(base.aval.shape)
                                           if d not in summed), axes=summed)
    o_kept = [d for d in range(base.aval.ndim) if d not in summed]      # base's axes
    pairs_c = [(d, axis[od]) for d, od in zip(contract, o_contract) if d not in gone]
    pairs_b = [(d, axis[od]) for d, od in zip(batch, o_batch) if d not in gone]
    # output axes labelled by where they come from: ("b", k) batch pair k, ("t", d) the
    # term's free axis d, ("o", d) the other operand's free axis d; the original order ...
    free = [d for d in range(operand.aval.ndim) if d not in contract + batch]
    o_free = [d for d in range(other.aval.ndim) if d not in o_contract + o_batch]
    theirs = [("o", d) for d in o_free]
    original = [("b", k) for k in range(len(batch))] + (
        [("t", d) for d in free] + theirs if side == 0 else theirs + [("t", d) for d in free])
    mine = [("t", d) for d in free if d not in gone]      # a free axis the term lacks is 1
    # the new product's: the kept batch pairs, then each side's free axes in memory order (the
    # other operand's unpaired batch axes are free now)
    paired = {bd for _, bd in pairs_c + pairs_b}
    o_new_free = [("o", other_axis[bd]) if other_axis[bd] in o_free
                  else ("b", o_batch.index(other_axis[bd])) for bd in o_kept if bd not in paired]
    mine_c = tuple(kept.index(d) for d, _ in pairs_c)
    theirs_c = tuple(o_kept.index(bd) for _, bd in pairs_c)
    mine_b = tuple(kept.index(d) for d, _ in pairs_b)
    theirs_b = tuple(o_kept.index(bd) for _, bd in pairs_b)
    # the larger operand goes right when its contracted axes lead its memory, left when they
    # trail: BLAS then packs it without transposing it (a transposed pack of the GMM's 20 MB
    # cotangent took 3 ms, twice the product itself)
    if math.prod(o.aval.shape) >= math.prod(t.aval.shape):
        term_left = theirs_c == tuple(range(len(theirs_c)))
    else:
        term_left = mine_c == tuple(range(len(kept) - len(mine_c), len(kept)))
    new = [("b", k) for k, d in enumerate(batch) if d not in gone] + (
        mine + o_new_free if term_left else o_new_free + mine)
    ins = (t, o) if term_left else (o, t)
    params = {"contract": (mine_c, theirs_c) if term_left else (theirs_c, mine_c),
              "batch": (mine_b, theirs_b) if term_left else (theirs_b, mine_b)}
    shape = {**{("b", k): operand.aval.shape[d] for k, d in enumerate(batch)},
             **{("t", d): operand.aval.shape[d] for d in free},
             **{("o", d): other.aval.shape[d] for d in o_free}}
    product = Var(fresh(eqn.outs[0].name), Aval(tuple(shape[label] for label in new), dtype))
    out.append(Eqn(LA.dot_general.name, ins, (product,), make_params(params), src))
    present = [label for label in original if label in new]
    perm = tuple(new.index(label) for label in present)
    if perm != tuple(range(len(perm))):
        product = emit(L.transpose.name, product, tuple(shape[label] for label in present),
                       perm=perm)
    if len(present) < len(original):
        broadcastable = tuple(shape[label] if label in new else 1 for label in original)
        product = emit(L.reshape.name, product, broadcastable, shape=broadcastable)
    return product
