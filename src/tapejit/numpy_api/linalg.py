"""numpy contractions -> dot_general: dot matmul @ tensordot einsum (with '...') inner outer vdot,
and the matrix-structure functions trace diag diagonal tril triu cross; numpy 2's np.linalg
aliases of them (matmul tensordot outer vecdot matrix_transpose diagonal trace cross)."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from ..errors import ShapeError, UnsupportedOperationError, at_source, user_error, user_source
from ..ops import elementwise as E
from ..ops import index as I
from ..ops import layout as L
from ..ops import linalg as LA
from ..trace import UFUNC_RULES, Tracer
from . import asarray, implements, lift, normalize_axis, reject
from .shape import broadcast_to_shape, in_common_dtype, moveaxis, ravel, reshape, stack
from .reductions import sum as _sum


def _dot(a: Any, b: Any, ca: Sequence[int], cb: Sequence[int], ba: Sequence[int] = (),
         bb: Sequence[int] = ()) -> Any:
    for i, j in zip(ca, cb):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(at_source(
                f"contraction: shapes {a.shape} and {b.shape} are not aligned "
                f"(axis {i} of size {a.shape[i]} vs axis {j} of size {b.shape[j]})",
                user_source()))
    return LA.dot_general(lift(a), lift(b), contract=(tuple(ca), tuple(cb)),
                          batch=(tuple(ba), tuple(bb)))


@implements(np.dot)
def dot(a: Any, b: Any, out: Any = None) -> Any:
    reject("numpy.dot", out=out)
    a, b = in_common_dtype([a, b], "numpy.dot")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return _dot(a, b, (a.ndim - 1,), (b.ndim - 1 if b.ndim == 1 else b.ndim - 2,))


@implements(np.matmul)
def matmul(a: Any, b: Any, out: Any = None, **kwargs: Any) -> Any:
    a, b = in_common_dtype([a, b], "numpy.matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(at_source("matmul: input operand does not have enough dimensions "
                                   f"({a.shape} @ {b.shape})", user_source()))
    if b.ndim <= 2:
        return _dot(a, b, (a.ndim - 1,), (0,))       # batch of rows times one matrix/vector
    va, a = a.ndim == 1, a if a.ndim > 1 else reshape(a, (1,) + a.shape)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to_shape(a, batch + a.shape[-2:], "matmul")
    b = broadcast_to_shape(b, batch + b.shape[-2:], "matmul")
    nb = len(batch)
    out = _dot(a, b, (nb + 1,), (nb,), tuple(range(nb)), tuple(range(nb)))
    return reshape(out, out.shape[:-2] + out.shape[-1:]) if va else out


@implements(np.tensordot)
def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
    a, b = in_common_dtype([a, b], "numpy.tensordot")
    if isinstance(axes, (int, np.integer)):
        ca, cb = range(a.ndim - axes, a.ndim), range(axes)
    else:
        ca, cb = (np.atleast_1d(x).tolist() for x in axes)
    return _dot(a, b, [normalize_axis(i, a.ndim, "tensordot") for i in ca],
                [normalize_axis(i, b.ndim, "tensordot") for i in cb])


@implements(np.inner)
def inner(a: Any, b: Any) -> Any:
    a, b = in_common_dtype([a, b], "numpy.inner")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return _dot(a, b, (a.ndim - 1,), (b.ndim - 1,))


@implements(np.vdot)
def vdot(a: Any, b: Any) -> Any:
    return inner(ravel(a), ravel(b))


@implements(np.outer)
def outer(a: Any, b: Any, out: Any = None) -> Any:
    reject("numpy.outer", out=out)
    a, b = ravel(a), ravel(b)
    return reshape(a, (a.size, 1)) * reshape(b, (1, b.size))


_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _sublist_spec(operands: tuple) -> tuple[str, tuple]:
    """einsum's list form `(op0, sublist0, op1, sublist1, ..., [sublistout])` as subscripts
    and operands: axis labels 0-25 are A-Z and 26-51 a-z (numpy's order), Ellipsis '...'."""
    def letters(sublist: Any) -> str:
        out = []
        for s in sublist:
            if s is Ellipsis:
                out.append("...")
            elif isinstance(s, (int, np.integer)) and 0 <= s < len(_LABELS):
                out.append(_LABELS[s])
            else:
                raise ShapeError(at_source(f"einsum: a sublist holds ints in [0, 52) and "
                                           f"Ellipsis, not {s!r}", user_source()))
        return "".join(out)
    odd = len(operands) % 2
    arrays, subs = operands[0:len(operands) - odd:2], operands[1::2]
    spec = ",".join(letters(s) for s in subs)
    return spec + ("->" + letters(operands[-1]) if odd else ""), tuple(arrays)


@implements(np.einsum)
def einsum(subscripts: Any, *operands: Any, optimize: Any = False, **kwargs: Any) -> Any:
    """np.einsum('ij,jk->ik', a, b), or the list form np.einsum(a, [0, 1], b, [1, 2], [0, 2])."""
    if kwargs.get("out") is not None:
        raise UnsupportedOperationError(at_source(
            "numpy.einsum: out= is not supported on traced arrays; use the result",
            user_source()))
    if not isinstance(subscripts, str):
        subscripts, operands = _sublist_spec((subscripts,) + operands)
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    specs = inputs.split(",")
    arrays = in_common_dtype(operands, "numpy.einsum")
    if "..." in spec:
        specs, output, arrays = _expand_ellipsis(specs, output if arrow else None, arrays)
    elif not arrow:
        letters = "".join(specs)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(specs) != len(arrays) or any(len(s) != x.ndim for s, x in zip(specs, arrays)):
        raise ShapeError(at_source(f"einsum: subscripts {subscripts!r} do not fit operands of "
                                   f"shapes {[x.shape for x in arrays]}", user_source()))
    _check_subscripts(subscripts, specs, output, arrays)
    terms = [_unbroadcast(spec, x, specs, arrays) for spec, x in zip(specs, arrays)]
    for i, term in enumerate(terms):
        others = "".join(s for j, (s, _) in enumerate(terms) if j != i) + output
        terms[i] = list(_reduce_term(term[0], term[1], others))
    spec_a, a = terms[0]
    for k, (spec_b, b) in enumerate(terms[1:], start=2):
        later = output + "".join(s for s, _ in terms[k:])
        shared = [c for c in spec_a if c in spec_b]
        batch = [c for c in shared if c in later]
        contract = [c for c in shared if c not in later]
        a = _dot(a, b, [spec_a.index(c) for c in contract], [spec_b.index(c) for c in contract],
                 [spec_a.index(c) for c in batch], [spec_b.index(c) for c in batch])
        spec_a = ("".join(batch) + "".join(c for c in spec_a if c not in shared)
                  + "".join(c for c in spec_b if c not in shared))
    spec_a, a = _reduce_term(spec_a, a, output)
    return np.transpose(a, [spec_a.index(c) for c in output]) if spec_a != output else a


def _unbroadcast(spec: str, x: Any, specs: list[str], arrays: list[Any]) -> list:
    """[spec, x] without its size-1 axes whose letter labels a longer axis elsewhere: numpy
    broadcasts them, which is the letter not being in this term (`m` of x[None] in
    'mnd,mdo->mno' against 20 m's). A repeated letter's axis is broadcast instead."""
    sizes: dict[str, int] = {}
    for s, a in zip(specs, arrays):
        for c, n in zip(s, a.shape):
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    short = [i for i, (c, n) in enumerate(zip(spec, x.shape)) if n == 1 != sizes[c]]
    repeated = [i for i in short if spec.count(spec[i]) > 1]
    if repeated:
        x = broadcast_to_shape(x, tuple(sizes[c] if i in repeated else n
                                        for i, (c, n) in enumerate(zip(spec, x.shape))))
    drop = [i for i in short if i not in repeated]
    if drop:
        x = reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in drop))
        spec = "".join(c for i, c in enumerate(spec) if i not in drop)
    return [spec, x]


def _check_subscripts(subscripts: str, specs: list[str], output: str, arrays: list[Any]
                      ) -> None:
    """Raise numpy's complaints about einsum subscripts at the user's line, with the fix."""
    sizes: dict[str, int] = {}
    problem = None
    for spec, x in zip(specs, arrays):
        for c, n in zip(spec, x.shape):
            if not c.isalpha():
                problem = f"{c!r} is not a subscript (subscripts are letters a-z, A-Z)"
            elif sizes.setdefault(c, n) != n and 1 not in (n, sizes[c]):
                problem = f"subscript {c!r} labels axes of sizes {sizes[c]} and {n}"
    for c in output:
        if c not in sizes:
            problem = (f"output subscript {c!r} is in no input (the inputs use "
                       f"{''.join(sorted(sizes))!r}); each output letter names an input axis")
        elif output.count(c) > 1:
            problem = f"output subscript {c!r} appears more than once"
    if problem is not None:
        raise ShapeError(at_source(
            f"einsum: {problem}, in subscripts {subscripts!r} for operands of shapes "
            f"{[x.shape for x in arrays]}. Fix the subscripts string (as numpy.einsum would "
            f"refuse it too).", user_source()))


def _expand_ellipsis(specs: list[str], output: str | None, arrays: list[Any]):
    """Spell out '...' with unused letters, right-aligned across operands (numpy broadcasts
    them: size-1 axes are broadcast first). Implicit output: the '...' axes, then the letters
    used once, sorted."""
    free = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba"
            if c not in "".join(specs)]
    counts = [x.ndim - len(s.replace("...", "")) for s, x in zip(specs, arrays)]
    n = max(counts)
    dots = "".join(free[:n][::-1])
    sizes = [1] * n
    for s, x, k in zip(specs, arrays, counts):
        if "..." in s:
            start = s.index("...")
            for i, d in enumerate(x.shape[start:start + k]):
                if sizes[n - k + i] == 1:    # a size 1 broadcasts to any, also to 0
                    sizes[n - k + i] = d
    out_specs, out_arrays = [], []
    for s, x, k in zip(specs, arrays, counts):
        if "..." in s:
            start = s.index("...")
            target = x.shape[:start] + tuple(sizes[n - k:]) + x.shape[start + k:]
            if target != x.shape:
                x = L.broadcast_in_dim(lift(x), shape=target, dims=tuple(range(x.ndim)))
            s = s.replace("...", dots[n - k:])
        out_specs.append(s)
        out_arrays.append(x)
    if output is None:
        letters = "".join(s.replace("...", "") for s in specs)
        output = "..." + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return out_specs, output.replace("...", dots), out_arrays


def _reduce_term(spec: str, x: Any, keep: str) -> tuple[str, Any]:
    """Take diagonals for repeated letters, then sum the letters not in `keep`."""
    while len(set(spec)) != len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        p = spec.index(c)
        q = spec.index(c, p + 1)
        x = diagonal(x, 0, p, q)
        spec = "".join(ch for i, ch in enumerate(spec) if i not in (p, q)) + c
    drop = tuple(i for i, c in enumerate(spec) if c not in keep)
    if drop:
        x = _sum(x, axis=drop)
        spec = "".join(c for c in spec if c in keep)
    return spec, x


@implements(np.diagonal)
def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    a = asarray(a)
    a1, a2 = (normalize_axis(ax, a.ndim, "numpy.diagonal") for ax in (axis1, axis2))
    moved = moveaxis(a, [a1, a2], [a.ndim - 2, a.ndim - 1])
    n1, n2 = moved.shape[-2:]
    rows = np.arange(max(0, -offset), min(n1, n2 - offset))
    flat = reshape(moved, moved.shape[:-2] + (n1 * n2,))
    return I.take(lift(flat), rows * n2 + rows + offset, axis=flat.ndim - 1)


@implements(np.trace)
def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: Any = None) -> Any:
    reject("numpy.trace", out=out)
    return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@implements(np.diag)
def diag(v: Any, k: int = 0) -> Any:
    v = asarray(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ShapeError("numpy.diag: input must be 1-d or 2-d")
    n = v.size + abs(k)
    rows = np.arange(v.size) + max(0, -k)
    zeros = L.broadcast_in_dim(np.zeros((), v.dtype), shape=(n * n,), dims=())
    return reshape(I.scatter_add(lift(zeros), rows * n + rows + k, lift(v), axis=0), (n, n))


def _triangle(m: Any, keep: np.ndarray) -> Any:
    m = asarray(m)
    return E.select(keep, m, np.zeros((), m.dtype))


implements(np.tril)(lambda m, k=0: _triangle(m, np.tri(*asarray(m).shape[-2:], k=k, dtype=bool)))
implements(np.triu)(lambda m, k=0: _triangle(
    m, ~np.tri(*asarray(m).shape[-2:], k=k - 1, dtype=bool)))


@implements(np.cross)
def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: Any = None) -> Any:
    """3-vectors, and numpy's deprecated 2-vectors (a missing z is 0; two 2-vectors give z)."""
    a, b = in_common_dtype([a, b], "numpy.cross")
    if axis is not None:
        axisa = axisb = axisc = axis
    if a.ndim < 1 or b.ndim < 1:
        raise user_error("At least one array has zero dimension")
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ShapeError(at_source(f"numpy.cross: incompatible dimensions for cross product "
                                   f"{a.shape} x {b.shape} (dimension must be 2 or 3)",
                                   user_source()))
    if 2 in (a.shape[-1], b.shape[-1]):
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of "
                      "3-dimensional vectors instead. (deprecated in NumPy 2.0)",
                      DeprecationWarning, stacklevel=3)
    (a0, a1, a2), (b0, b1, b2) = ([x[..., i] if i < x.shape[-1] else None for i in range(3)]
                                  for x in (a, b))
    z = _minus(_times(a0, b1), _times(a1, b0))
    if a2 is None and b2 is None:
        return z
    c = stack([_minus(_times(a1, b2), _times(a2, b1)), _minus(_times(a2, b0), _times(a0, b2)),
               z], axis=-1)
    return moveaxis(c, -1, axisc)


def _times(p: Any, q: Any) -> Any:
    return None if p is None or q is None else p * q


def _minus(p: Any, q: Any) -> Any:
    """p - q, where None is a component known to be 0."""
    return p if q is None else -q if p is None else p - q


Tracer.dot = dot
Tracer.diagonal = diagonal
Tracer.trace = trace
UFUNC_RULES[np.matmul] = matmul  # a generalized ufunc in numpy 2: dispatched as a ufunc

if hasattr(np.linalg, "matrix_transpose"):      # numpy 2's array-API names, on the last axes
    implements(np.linalg.matmul)(lambda x1, x2, /: matmul(x1, x2))
    implements(np.linalg.tensordot)(lambda x1, x2, /, *, axes=2: tensordot(x1, x2, axes))
    implements(np.linalg.outer)(lambda x1, x2, /: outer(x1, x2))
    implements(np.linalg.vecdot)(lambda x1, x2, /, *, axis=-1: _sum(
        asarray(x1) * asarray(x2), axis=axis))
    implements(np.linalg.matrix_transpose)(lambda x, /: moveaxis(x, -1, -2))
    implements(np.linalg.diagonal)(lambda x, /, *, offset=0: diagonal(x, offset, -2, -1))
    implements(np.linalg.trace)(lambda x, /, *, offset=0, dtype=None: trace(
        x, offset, -2, -1, dtype))
    implements(np.linalg.cross)(lambda x1, x2, /, *, axis=-1: cross(x1, x2, axis=axis))
