"""dot_general: the one contraction primitive (matmul, dot, tensordot, einsum lower to it).

`contract=((lhs axes), (rhs axes))` are summed over pairwise; `batch=((lhs axes), (rhs axes))`
are shared. The output axes are: batch axes, then lhs free axes, then rhs free axes (each in
increasing order). The VJP of each side is another dot_general followed by a transpose.
"""
from __future__ import annotations

import string

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from . import Kind, defop
from . import axes as _axes
from .layout import shifted, transpose


def free_axes(ndim: int, contract: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def _dot_shape(lhs: Aval, rhs: Aval, *, contract, batch) -> Aval:
    (lc, rc), (lb, rb) = contract, batch
    ok = (len(lc) == len(rc) and len(lb) == len(rb)
          and all(0 <= a < lhs.ndim for a in lc + lb) and all(0 <= a < rhs.ndim for a in rc + rb)
          and len(set(lc + lb)) == len(lc + lb) and len(set(rc + rb)) == len(rc + rb)
          and all(lhs.shape[a] == rhs.shape[b] for a, b in zip(lc + lb, rc + rb)))
    if not ok:
        raise ShapeError(f"dot_general: shapes {lhs} and {rhs} do not fit "
                         f"contract={contract} batch={batch}")
    if lhs.dtype != rhs.dtype:
        raise DtypeError(f"dot_general: operands have different dtypes {lhs} and {rhs}")
    shape = (tuple(lhs.shape[a] for a in lb)
             + tuple(lhs.shape[a] for a in free_axes(lhs.ndim, lc, lb))
             + tuple(rhs.shape[a] for a in free_axes(rhs.ndim, rc, rb)))
    return Aval(shape, lhs.dtype)


def _dot_impl(lhs, rhs, *, contract, batch):
    (lc, rc), (lb, rb) = contract, batch
    if not lb and lc == (lhs.ndim - 1,) and rc == (0,) and rhs.ndim <= 2:
        return np.dot(lhs, rhs)                            # plain matrix product: BLAS
    letters = iter(string.ascii_letters)
    lsub = [next(letters) for _ in range(lhs.ndim)]
    rsub = [next(letters) for _ in range(rhs.ndim)]
    for a, b in zip(lc + lb, rc + rb):
        rsub[b] = lsub[a]
    out = ([lsub[a] for a in lb] + [lsub[a] for a in free_axes(lhs.ndim, lc, lb)]
           + [rsub[a] for a in free_axes(rhs.ndim, rc, rb)])
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs, optimize=True).astype(lhs.dtype, copy=False)


def _side_vjp(ct, other, own_ndim, own_c, own_b, other_c, other_b, other_first):
    """Cotangent of one operand: contract ct with the other operand over the other's free
    axes, then transpose the result into this operand's axis order. Of the two operand
    orders, the one needing no transpose is used when there is one (x.T @ ct, not
    (ct.T @ x).T)."""
    nb = len(own_b)
    own_free = free_axes(own_ndim, own_c, own_b)
    other_free = free_axes(other.ndim, other_c, other_b)
    # ct axes: batch, lhs free, rhs free; the other operand's free axes sit in one of the groups
    n_lhs_free = len(own_free) if not other_first else len(other_free)
    other_group = (tuple(range(nb + n_lhs_free, ct.ndim)) if not other_first
                   else tuple(range(nb, nb + n_lhs_free)))
    contracted = [own_c[other_c.index(r)] for r in sorted(other_c)]
    # ct first: batch, this operand's free axes, then the other's contracted axes
    ct_first = list(own_b) + list(own_free) + contracted
    # other first: batch, the other's contracted axes, then this operand's free axes
    other_first_order = list(own_b) + contracted + list(own_free)
    if other_first_order == list(range(own_ndim)) != ct_first:
        return dot_general(other, ct, contract=(other_free, other_group),
                           batch=(tuple(other_b), tuple(range(nb))))
    result = dot_general(ct, other, contract=(other_group, other_free),
                         batch=(tuple(range(nb)), tuple(other_b)))
    return transpose(result, perm=tuple(ct_first.index(d) for d in range(own_ndim)))


def _dot_vjp(ct, y, lhs, rhs, *, contract, batch):
    (lc, rc), (lb, rb) = contract, batch
    return (_side_vjp(ct, rhs, lhs.ndim, lc, lb, rc, rb, other_first=False),
            _side_vjp(ct, lhs, rhs.ndim, rc, rb, lc, lb, other_first=True))


def _dot_batch(bind, xs, flags, *, contract, batch):
    # both batched: one more batch axis; one batched: its batch axis is a free axis, moved to
    # the front of the result (after the batch axes come lhs's free axes, then rhs's)
    (lc, rc), (lb, rb) = contract, batch
    if all(flags):
        return bind(*xs, contract=(shifted(lc), shifted(rc)),
                    batch=((0,) + shifted(lb), (0,) + shifted(rb)))
    if flags[0]:
        out = bind(*xs, contract=(shifted(lc), tuple(rc)), batch=(shifted(lb), tuple(rb)))
        where = len(lb)                        # the first free axis of lhs
    else:
        out = bind(*xs, contract=(tuple(lc), shifted(rc)), batch=(tuple(lb), shifted(rb)))
        where = np.ndim(xs[0]) - len(lc)       # batch dims, lhs free, then rhs's first free
    if where == 0:
        return out
    return transpose(out, perm=(where,) + tuple(d for d in range(np.ndim(out)) if d != where))


dot_general = defop("dot_general", Kind.LINALG, _dot_impl, shape=_dot_shape, vjp=_dot_vjp,
                    axes=_axes.contracted, batch=_dot_batch)
