"""Axis rules: which axes of an op's operands and output are forced to be the same axis.

An op's `axes` rule takes the operand shapes, the output shape and the op's params and returns
groups of ports, `(k, axis)` for operand k's axis or `(OUT, axis)` for the output's; the axes
of a group are one axis (dims.py makes them one symbol). An output axis in no group is a new
axis. A rule states what the op's semantics force (a broadcast lines operands up from the
right, a contraction pairs its axes), never what equal lengths suggest; axes of length 1 in a
group are broadcast, not tied (dims.py drops them).
"""
from __future__ import annotations

from typing import Any, Callable

Shape = tuple[int, ...]
Port = tuple[int, int]
Groups = list[list[Port]]
AxesRule = Callable[..., Groups]
OUT = -1


def broadcast(ins: tuple[Shape, ...], out: Shape, **params: Any) -> Groups:
    """numpy broadcasting: operands line up with the output from the right."""
    groups = []
    for d in range(len(out)):
        group = [(OUT, d)]
        for k, shape in enumerate(ins):
            a = d - (len(out) - len(shape))
            if a >= 0:
                group.append((k, a))
        groups.append(group)
    return groups


def same(ins: tuple[Shape, ...], out: Shape, **params: Any) -> Groups:
    """The output's axes are operand 0's (cumulative ops, reversal, stop_gradient)."""
    return [[(OUT, d), (0, d)] for d in range(len(out))]


def none(ins: tuple[Shape, ...], out: Shape, **params: Any) -> Groups:
    """Nothing is forced: every output axis is new (calls, control flow)."""
    return []


def kept(ins: tuple[Shape, ...], out: Shape, *, axes: tuple[int, ...] = (),
         axis: int | None = None, **params: Any) -> Groups:
    """A reduction: the output keeps the operand's axes not in `axes` (or `axis`)."""
    dropped = set(axes) | ({axis} if axis is not None else set())
    rest = [a for a in range(len(ins[0])) if a not in dropped] if ins else []
    return [[(OUT, d), (0, a)] for d, a in enumerate(rest)]


def permuted(ins: tuple[Shape, ...], out: Shape, *, perm: tuple[int, ...]) -> Groups:
    return [[(OUT, d), (0, p)] for d, p in enumerate(perm)]


def placed(ins: tuple[Shape, ...], out: Shape, *, shape: Shape, dims: tuple[int, ...]) -> Groups:
    """broadcast_in_dim: operand axis i is output axis dims[i] (unless stretched from 1)."""
    return [[(OUT, d), (0, i)] for i, d in enumerate(dims)]


def regrouped(ins: tuple[Shape, ...], out: Shape, *, shape: Shape) -> Groups:
    """reshape: the non-unit axes of both shapes split into runs of equal product; a run of one
    axis on each side is that axis (the rest are new axes)."""
    x = ins[0]
    if 0 in x:
        return []
    xs = [a for a, n in enumerate(x) if n != 1]
    ys = [b for b, n in enumerate(out) if n != 1]
    groups: Groups = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        i_end, j_end, px, py = i + 1, j + 1, x[xs[i]], out[ys[j]]
        while px != py:
            if px < py:
                px, i_end = px * x[xs[i_end]], i_end + 1
            else:
                py, j_end = py * out[ys[j_end]], j_end + 1
        if i_end - i == j_end - j == 1:
            groups.append([(OUT, ys[j]), (0, xs[i])])
        i, j = i_end, j_end
    return groups


def whole_axes(ins: tuple[Shape, ...], out: Shape, *, start: Shape, limit: Shape,
               step: Shape) -> Groups:
    """slice: an axis taken whole is the operand's axis; any other is new."""
    return [[(OUT, d), (0, d)] for d, (s, l, k, n) in enumerate(zip(start, limit, step, ins[0]))
            if s == 0 and l == n and k == 1]


def unpadded(ins: tuple[Shape, ...], out: Shape, *, lo: Shape, hi: Shape,
             interior: Shape) -> Groups:
    """pad: an axis with no padding is the operand's axis; any other is new."""
    return [[(OUT, d), (0, d)] for d, (l, h, i) in enumerate(zip(lo, hi, interior))
            if l == h == i == 0]


def joined(ins: tuple[Shape, ...], out: Shape, *, axis: int) -> Groups:
    """concatenate: every axis but `axis` is shared by the operands and the output."""
    return [[(OUT, d)] + [(k, d) for k in range(len(ins))]
            for d in range(len(out)) if d != axis]


def contracted(ins: tuple[Shape, ...], out: Shape, *, contract: Any, batch: Any) -> Groups:
    """dot_general: paired contraction and batch axes; the output is batch + lhs free + rhs
    free axes."""
    (lc, rc), (lb, rb) = contract, batch
    groups: Groups = [[(0, a), (1, b)] for a, b in zip(lc, rc)]
    lfree = [a for a in range(len(ins[0])) if a not in lc and a not in lb]
    rfree = [a for a in range(len(ins[1])) if a not in rc and a not in rb]
    ports = [[(0, a), (1, b)] for a, b in zip(lb, rb)] + [[(0, a)] for a in lfree] \
        + [[(1, a)] for a in rfree]
    return groups + [[(OUT, d)] + p for d, p in enumerate(ports)]


def gathered(ins: tuple[Shape, ...], out: Shape, *, axis: int) -> Groups:
    """take: output = x's axes before `axis`, the index array's axes, x's axes after it."""
    x, idx = ins[0], ins[1]
    ports = [[(0, a)] for a in range(axis)] + [[(1, a)] for a in range(len(idx))] \
        + [[(0, a)] for a in range(axis + 1, len(x))]
    return [[(OUT, d)] + p for d, p in enumerate(ports)]


def scattered(ins: tuple[Shape, ...], out: Shape, *, axis: int) -> Groups:
    """scatter_add: the output is x; the updates have take's shape."""
    groups = [[(OUT, d), (0, d)] for d in range(len(out))]
    return groups + [g[1:] + [(2, d)] for d, g in
                     enumerate(gathered(ins[:2], (), axis=axis))]
