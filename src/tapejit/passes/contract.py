"""Small contractions as loops: a `dot_general` whose matrices are tiny in two of their three
sizes (rows, columns, contracted length, each at most `SMALL`) becomes a broadcast multiply
and a `reduce_sum`, which fusion puts in a loop nest with the eqns around it.

A BLAS call pays for itself on matrices; a batch of 10x10 @ 10x10000 products (a GMM's
per-component `Q_k (x_i - mu_k)`, batch axis in the middle of its operand) makes BLAS calls of
little work each, around layout copies of every operand and the result (25 copies of 20 MB in
the GMM gradient). As a loop the product reads its operands in place and its result never
touches memory when the eqns reading it fuse with it.

For the same reason an outer product (nothing contracted) is always a loop, and so is a
matrix-vector product whose matrix the tape computes (an MLP's one-output layer `tanh(..) @ w`,
its gradient `g @ tanh(..)`): the loop fuses with the one computing the matrix or with the
other readers of its rows, and the matrix is not written and read again (10^6 x 64 rows: 1.8x
faster). A matrix-vector product of an input matrix stays a BLAS call: a loop would sum each
row's products one after another (2.5-4x slower at 256-1000 rows, measured).

The product's axes are ordered after the operands' memory orders (looking through a transpose
that produces an operand) and the order its one reader wants (a transpose reading the result),
so the loop nest walks memory in order and the transposes around it cancel (`simplify` folds
transpose of transpose)."""
from __future__ import annotations

import math

from ..avals import Aval
from ..ir import Eqn, Tape, Var, make_params
from ..ops import elementwise as E
from ..ops import layout as L
from ..ops import linalg as LA
from .rewrite import expand, fresh_names

SMALL = 16          # a matrix size at most this is "tiny"


def _small(eqn: Eqn, computed: set[str]) -> bool:
    """Whether `eqn` (a dot_general) is better as a loop (module docstring); `computed`: the
    names the tape's eqns compute."""
    lhs, rhs = eqn.ins[0].aval, eqn.ins[1].aval
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    if lhs.dtype.kind not in "fc" or lhs.dtype != rhs.dtype:
        return False
    rows = math.prod(n for d, n in enumerate(lhs.shape) if d not in lc and d not in lb)
    cols = math.prod(n for d, n in enumerate(rhs.shape) if d not in rc and d not in rb)
    inner = math.prod(lhs.shape[d] for d in lc)
    if sum(1 for n in (rows, cols, inner) if n <= SMALL) >= 2 or inner == 1:
        return True
    matrix = eqn.ins[1] if rows == 1 else eqn.ins[0] if cols == 1 else None
    return isinstance(matrix, Var) and matrix.name in computed


def _merge(order: list[str], other: list[str]) -> list[str]:
    """`order` with the labels of `other` it lacks, each right after the label `other` has
    before it (or first)."""
    order = list(order)
    for k, label in enumerate(other):
        if label in order:
            continue
        before = next((other[j] for j in range(k - 1, -1, -1) if other[j] in order), None)
        order.insert(0 if before is None else order.index(before) + 1, label)
    return order


def small_contractions(tape: Tape) -> Tape:
    """Rewrite each small `dot_general` of `tape` into broadcast, mul and reduce_sum."""
    computed = {o.name for e in tape.eqns for o in e.outs}
    if not any(e.op == LA.dot_general.name and _small(e, computed) for e in tape.eqns):
        return tape
    producers: dict[str, Eqn] = {}
    readers: dict[str, list[Eqn]] = {}
    for eqn in tape.eqns:
        for o in eqn.outs:
            producers[o.name] = eqn
        for a in eqn.ins:
            if isinstance(a, Var):
                readers.setdefault(a.name, []).append(eqn)
    outputs = {o.name for o in tape.outvars if isinstance(o, Var)}
    fresh = fresh_names(tape, "_c")

    def rewrite(eqn: Eqn) -> list[Eqn] | None:
        if eqn.op != LA.dot_general.name or not _small(eqn, computed):
            return None
        eqns: list[Eqn] = []
        _rewrite(eqn, producers, readers, outputs, fresh, eqns)
        return eqns

    return expand(tape, rewrite)


def _rewrite(eqn: Eqn, producers: dict[str, Eqn], readers: dict[str, list[Eqn]],
             outputs: set[str], fresh, emit: list[Eqn]) -> Eqn:
    lhs, rhs = eqn.ins
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    result = eqn.outs[0]
    # a label per axis: b<k> batch, l<k> lhs free, r<k> rhs free, c<k> contracted
    lhs_labels = [""] * lhs.aval.ndim
    rhs_labels = [""] * rhs.aval.ndim
    size: dict[str, int] = {}
    for k, (a, b) in enumerate(zip(lb, rb)):
        lhs_labels[a] = rhs_labels[b] = f"b{k}"
        size[f"b{k}"] = lhs.aval.shape[a]
    for k, (a, b) in enumerate(zip(lc, rc)):
        lhs_labels[a] = rhs_labels[b] = f"c{k}"
        size[f"c{k}"] = lhs.aval.shape[a]
    free_l = [d for d in range(lhs.aval.ndim) if not lhs_labels[d]]
    free_r = [d for d in range(rhs.aval.ndim) if not rhs_labels[d]]
    for k, d in enumerate(free_l):
        lhs_labels[d] = f"l{k}"
        size[f"l{k}"] = lhs.aval.shape[d]
    for k, d in enumerate(free_r):
        rhs_labels[d] = f"r{k}"
        size[f"r{k}"] = rhs.aval.shape[d]
    dot_order = ([f"b{k}" for k in range(len(lb))] + [f"l{k}" for k in range(len(free_l))]
                 + [f"r{k}" for k in range(len(free_r))])

    def memory_order(atom, labels: list[str]) -> list[str]:
        """The labels in the order the operand's values lie in memory (a transpose producing
        it reads its own operand, in that operand's order)."""
        producer = producers.get(atom.name) if isinstance(atom, Var) else None
        if producer is not None and producer.op == L.transpose.name:
            perm = producer.kw["perm"]       # out axis j is operand axis perm[j]
            inverse = [0] * len(perm)
            for j, p in enumerate(perm):
                inverse[p] = j
            return [labels[inverse[a]] for a in range(len(perm))]
        return list(labels)

    wanted = list(dot_order)
    users = readers.get(result.name, [])
    if len(users) == 1 and users[0].op == L.transpose.name and result.name not in outputs:
        wanted = [dot_order[p] for p in users[0].kw["perm"]]
    sides = sorted([(math.prod(lhs.aval.shape), memory_order(lhs, lhs_labels)),
                    (math.prod(rhs.aval.shape), memory_order(rhs, rhs_labels))],
                   key=lambda s: -s[0])
    merged = _merge(sides[0][1], sides[1][1])
    contracted = [label for label in merged if label[0] == "c"]
    # contracted axes where the larger operand has them: innermost when they lie last in its
    # memory (each output element's sum in a row buffer), else outermost (the outputs
    # accumulate while the loops walk the operand in order). (By layout, not by size: a new
    # batch size keeps the program.)
    order = contracted + wanted if merged and merged[0][0] == "c" else wanted + contracted
    shape = tuple(size[label] for label in order)
    dtype = result.aval.dtype

    def ordered(atom, labels: list[str]) -> tuple[Var, tuple[int, ...]]:
        """`atom` with its axes in the product's order, and where they go in the product."""
        mine = [label for label in order if label in labels]
        perm = tuple(labels.index(label) for label in mine)
        x = atom
        if perm != tuple(range(len(perm))):
            producer = producers.get(atom.name)
            if producer is not None and producer.op == L.transpose.name:   # compose the two
                inner = producer.kw["perm"]
                perm = tuple(inner[p] for p in perm)
                x = producer.ins[0]
            if perm != tuple(range(len(perm))):
                t = Var(fresh(result.name), Aval(tuple(x.aval.shape[p] for p in perm), dtype))
                emit.append(Eqn(L.transpose.name, (x,), (t,), make_params({"perm": perm}), eqn.src))
                x = t
        return x, tuple(order.index(label) for label in mine)

    def broadcast(x: Var, dims: tuple[int, ...]) -> Var:
        """`x` broadcast to the product's shape (emitted after both operands' transposes, so
        the broadcasts join the product's loop nest)."""
        if x.aval.shape == shape:
            return x
        b = Var(fresh(result.name), Aval(shape, dtype))
        emit.append(Eqn(L.broadcast_in_dim.name, (x,), (b,),
                        make_params({"shape": shape, "dims": dims}), eqn.src))
        return b

    (lx, ldims), (rx, rdims) = ordered(lhs, lhs_labels), ordered(rhs, rhs_labels)
    a, b = broadcast(lx, ldims), broadcast(rx, rdims)
    kept = [label for label in order if not label.startswith("c")]
    axes = tuple(k for k, label in enumerate(order) if label.startswith("c"))
    to_dot = tuple(kept.index(label) for label in dot_order)
    last_is_product = not axes and to_dot == tuple(range(len(to_dot)))
    prod = result if last_is_product else Var(fresh(result.name), Aval(shape, dtype))
    emit.append(Eqn(E.mul.name, (a, b), (prod,), (), eqn.src))
    if last_is_product:
        return eqn
    reduced = prod
    if axes:
        identity = to_dot == tuple(range(len(to_dot)))
        reduced = result if identity else Var(
            fresh(result.name), Aval(tuple(size[label] for label in kept), dtype))
        emit.append(Eqn(L.reduce_sum.name, (prod,), (reduced,), make_params({"axes": axes}),
                        eqn.src))
        if identity:
            return eqn
    emit.append(Eqn(L.transpose.name, (reduced,), (result,), make_params({"perm": to_dot}),
                    eqn.src))
    return eqn


# ---- sums of products: reduce_sum(... dot_general(a, b) ...) -> dot_general(reduce_sum(a), b)


class _Sums:
    """Pushes a reduce_sum down to the operands of a matrix product it sums (through neg,
    add/sub of same-shape terms, mul by a factor constant along the summed axes, transpose):
    summing a product's free axes sums that operand before the product (and a summed batch
    axis is contracted), so the product shrinks by the summed length. A GMM's gradient
    w.r.t. the means sums (Q_k^T ct_qx) over 10,000 points: one (25, 10) product of the summed
    cotangent instead of a (10000, 25, 10) one. A sum of a product by a factor constant along
    the summed axes becomes the factor times the sum (`factors`), product or not."""

    def __init__(self, tape: Tape, fresh) -> None:
        self.fresh = fresh
        self.producers: dict[str, Eqn] = {}
        self.reads: dict[str, int] = {}
        for eqn in tape.eqns:
            for o in eqn.outs:
                self.producers[o.name] = eqn
            for a in eqn.ins:
                if isinstance(a, Var):
                    self.reads[a.name] = self.reads.get(a.name, 0) + 1
        for o in tape.outvars:
            if isinstance(o, Var):
                self.reads[o.name] = self.reads.get(o.name, 0) + 1
        self.emitted: list[Eqn] = []

    def _through(self, atom) -> Eqn | None:
        """The producer of `atom` a sum may move through, if any."""
        if not isinstance(atom, Var):
            return None
        eqn = self.producers.get(atom.name)
        if eqn is None or (eqn.op != L.transpose.name and self.reads.get(atom.name, 0) != 1):
            return None
        return eqn

    def reaches_product(self, atom, axes: tuple[int, ...]) -> bool:
        """Whether summing `atom` over `axes` can move into a product (worth rewriting)."""
        eqn = self._through(atom)
        if eqn is None or not axes:
            return False
        out = eqn.outs[0].aval
        if eqn.op == LA.dot_general.name:
            return self.reads.get(atom.name, 0) == 1
        if eqn.op == E.neg.name:
            return self.reaches_product(eqn.ins[0], axes)
        if eqn.op in (E.add.name, E.sub.name):
            return all(a.aval == out for a in eqn.ins) and any(
                self.reaches_product(a, axes) for a in eqn.ins)
        if eqn.op == E.mul.name:
            return any(self._factor(eqn, k, axes) and self.reaches_product(eqn.ins[k], axes)
                       for k in (0, 1))
        if eqn.op == L.transpose.name:
            perm = eqn.kw["perm"]
            return self.reaches_product(eqn.ins[0], tuple(sorted(perm[a] for a in axes)))
        return False

    def factors(self, atom, axes: tuple[int, ...]) -> bool:
        """Whether `atom` is a term times a factor constant along `axes`: its sum is the
        factor times the term's sum (one multiply per sum, not per element; and the term's
        sum is often computed anyway, so CSE shares it)."""
        eqn = self._through(atom)
        return bool(axes) and eqn is not None and eqn.op == E.mul.name and any(
            self._factor(eqn, k, axes) for k in (0, 1))

    @staticmethod
    def _factor(eqn: Eqn, k: int, axes: tuple[int, ...]) -> bool:
        """Whether in mul `eqn`, operand k is the term and the other a factor constant along
        `axes` (size 1 there, or a scalar)."""
        term, factor = eqn.ins[k].aval, eqn.ins[1 - k].aval
        out = eqn.outs[0].aval
        return term == out and (factor.ndim == 0 or (
            factor.ndim == out.ndim and all(factor.shape[a] == 1 for a in axes)))

    def _emit(self, op: str, ins: tuple, aval, params: dict, src) -> Var:
        out = Var(self.fresh("s"), aval)
        self.emitted.append(Eqn(op, tuple(ins), (out,), make_params(params), src))
        return out

    def sum(self, atom, axes: tuple[int, ...], src):
        """A var holding reduce_sum(atom, axes), pushed down where it can go."""
        shape = tuple(n for d, n in enumerate(atom.aval.shape) if d not in axes)
        aval = Aval(shape, atom.aval.dtype)
        if not axes:
            return atom
        eqn = self._through(atom)
        if eqn is not None and eqn.op == L.transpose.name:
            perm = eqn.kw["perm"]
            inner = tuple(sorted(perm[a] for a in axes))
            summed = self.sum(eqn.ins[0], inner, src)
            kept_inner = [d for d in range(len(perm)) if d not in inner]
            new_perm = tuple(kept_inner.index(perm[a]) for a in range(len(perm))
                             if a not in axes)
            if new_perm == tuple(range(len(new_perm))):
                return summed
            return self._emit(L.transpose.name, (summed,), aval, {"perm": new_perm}, src)
        if eqn is not None and (self.reaches_product(atom, axes) or self.factors(atom, axes)):
            if eqn.op == E.neg.name:
                return self._emit(E.neg.name, (self.sum(eqn.ins[0], axes, src),), aval, {}, src)
            if eqn.op in (E.add.name, E.sub.name):
                terms = tuple(self.sum(a, axes, src) for a in eqn.ins)
                return self._emit(eqn.op, terms, aval, {}, src)
            if eqn.op == E.mul.name:
                terms = [k for k in (0, 1) if self._factor(eqn, k, axes)]
                k = next((k for k in terms if self.reaches_product(eqn.ins[k], axes)), terms[0])
                factor = eqn.ins[1 - k]
                if factor.aval.ndim:
                    factor = self._emit(L.reshape.name, (factor,), Aval(tuple(
                        n for d, n in enumerate(factor.aval.shape) if d not in axes),
                        factor.aval.dtype), {"shape": tuple(
                            n for d, n in enumerate(factor.aval.shape) if d not in axes)}, src)
                term = self.sum(eqn.ins[k], axes, src)
                return self._emit(E.mul.name, (term, factor) if k == 0 else (factor, term), aval,
                                  {}, src)
            if eqn.op == LA.dot_general.name:
                return self._product(eqn, axes, aval, src)
        return self._emit(L.reduce_sum.name, (atom,), aval, {"axes": tuple(axes)}, src)

    def _product(self, eqn: Eqn, axes: tuple[int, ...], aval, src) -> Var:
        lhs, rhs = eqn.ins
        (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
        nb = len(lb)
        free_l = [d for d in range(lhs.aval.ndim) if d not in lc and d not in lb]
        free_r = [d for d in range(rhs.aval.ndim) if d not in rc and d not in rb]
        sum_l = [free_l[a - nb] for a in axes if nb <= a < nb + len(free_l)]
        sum_r = [free_r[a - nb - len(free_l)] for a in axes if a >= nb + len(free_l)]
        batch_summed = [k for k in range(nb) if k in axes]
        lc, rc = lc + tuple(lb[k] for k in batch_summed), rc + tuple(rb[k] for k in batch_summed)
        lb = tuple(a for k, a in enumerate(lb) if k not in batch_summed)
        rb = tuple(a for k, a in enumerate(rb) if k not in batch_summed)

        def renumber(dims, dropped):
            return tuple(d - sum(1 for x in dropped if x < d) for d in dims)

        new_l = self.sum(lhs, tuple(sorted(sum_l)), src)
        new_r = self.sum(rhs, tuple(sorted(sum_r)), src)
        params = {"contract": (renumber(lc, sum_l), renumber(rc, sum_r)),
                  "batch": (renumber(lb, sum_l), renumber(rb, sum_r))}
        return self._emit(LA.dot_general.name, (new_l, new_r), aval, params, src)


def sums_of_products(tape: Tape) -> Tape:
    """Move each reduce_sum that sums a matrix product's free axes into its operands, and each
    that sums a product by a factor constant along the summed axes before the factor."""
    sums = _Sums(tape, fresh_names(tape, ""))

    def rewrite(eqn: Eqn) -> list[Eqn] | None:
        axes = eqn.kw["axes"] if eqn.op == L.reduce_sum.name else ()
        if not axes or not (sums.reaches_product(eqn.ins[0], axes)
                            or sums.factors(eqn.ins[0], axes)):
            return None
        result = sums.sum(eqn.ins[0], tuple(sorted(axes)), eqn.src)
        last = sums.emitted[-1]
        assert last.outs[0] == result
        eqns = sums.emitted[:-1] + [Eqn(last.op, last.ins, eqn.outs, last.params, last.src)]
        sums.emitted.clear()
        return eqns

    return expand(tape, rewrite)
