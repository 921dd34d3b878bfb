"""The op-table tests: every row of op_db.ROWS through forward, gradient, float32, second-order
and IR checks, and the coverage checks that fail when an op or a numpy function has no row.

These checks run each row on the numpy interpreter, the ground truth: a program per row and
per check would cost the suite a compile each. The same rows run compiled in
test_numba_backend.py, in programs that combine a chunk of rows (float64 and float32, values,
gradients and second order, first and later calls), checked against the interpreter."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import tapejit as tj
from tapejit import autodiff, guards, trace
from tapejit.interpret import interpret
from tapejit.numpy_api import operators
from tapejit.ops import OPS
from tapejit.pytree import flatten

from gradcheck import check_grads, check_vjp
from op_db import F32, F64, REQUIRED_METHODS, REQUIRED_UFUNC_METHODS, ROWS, Row

ids = [r.name for r in ROWS]
DIFF = [r for r in ROWS if r.diff and r.expect_grad is None]
GRAD2 = [r for r in ROWS if r.grad2]


pytestmark = pytest.mark.usefixtures("interpreter")     # semantics: the numpy interpreter


def _rng(row: Row, salt: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{row.name}/{salt}".encode()))


def _leaves(x):
    return [np.asarray(leaf) for leaf in flatten(x)[0]]


def _reference(row: Row, args):
    with np.errstate(all="ignore"):
        return (row.ref or row.fn)(*[a.copy() for a in args])


def _reference_int(row: Row, args):
    with np.errstate(all="ignore"):
        return row.int_fn(*args)


def _cotangent(out, rng: np.random.Generator):
    """A random cotangent for the float leaves of `out` (zeros for the others)."""
    leaves, td = flatten(out)
    from tapejit.pytree import unflatten
    cts = [rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype)
           if np.asarray(x).dtype.kind == "f" else np.zeros(np.shape(x), np.asarray(x).dtype)
           for x in leaves]
    return unflatten(td, cts)


def _assert_same(got, expected, rtol: float, what: str) -> None:
    got, expected = _leaves(got), _leaves(expected)
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, numpy gives {len(expected)}"
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, f"{what}: dtype {g.dtype}, numpy gives {e.dtype}"
        assert g.shape == e.shape, f"{what}: shape {g.shape}, numpy gives {e.shape}"
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(g, e, err_msg=what)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


# ---- coverage: a test fails when an op or a supported numpy function has no row ----------------
def _covered() -> set:
    return {c for r in ROWS for c in r.covers}


def test_row_names_unique():
    assert len(set(ids)) == len(ids), sorted(n for n in ids if ids.count(n) > 1)


# `fused` is made by the fuse pass, `segment` by code generation, never traced: test_passes
# checks fused groups on every zoo program, test_segments.py segments on random programs.
# `check` runs only under checkify (the other transforms refuse it): test_checkify.py.
COMPILER_OPS = {"fused", "segment", "check"}


def test_every_primitive_has_a_row():
    missing = sorted(set(OPS) - COMPILER_OPS - {r.prim for r in ROWS})
    assert not missing, f"primitives without a row in op_db.py: {missing}"


def test_every_ufunc_has_a_row():
    missing = sorted(u.__name__ for u in trace.UFUNC_RULES if u not in _covered())
    assert not missing, f"ufuncs without a row in op_db.py: {missing}"


def test_every_numpy_function_has_a_row():
    covered = _covered()
    missing = sorted(f.__name__ for f in trace.FUNCTION_RULES if f not in covered)
    missing += [n for n in guards.TRACED if f"constructor:{n}" not in covered]
    assert not missing, f"numpy functions without a row in op_db.py: {missing}"


def test_every_method_and_operator_has_a_row():
    required = {f"method:{m}" for m in [*REQUIRED_METHODS, *trace.METHOD_RULES]}
    required |= {f"method:{m}" for m in REQUIRED_UFUNC_METHODS}
    for name in operators.BINARY:
        required |= {f"operator:__{name}__", f"operator:__r{name}__"}
    required |= {f"operator:__{n}__" for n in ("lt le gt ge eq ne neg pos abs invert getitem "
                                               "setitem").split()}
    missing = sorted(required - _covered())
    assert not missing, f"methods/operators without a row in op_db.py: {missing}"


def test_rows_cover_only_supported_things():
    for r in ROWS:
        for c in r.covers:
            if isinstance(c, str):
                kind, name = c.split(":")
                if kind == "constructor":           # np.array & co (guards.py's wrappers)
                    assert name in guards.TRACED, (r.name, c)
                    continue
                assert hasattr(trace.Tracer, name) or name in trace.METHOD_RULES, (r.name, c)
            else:
                assert c in trace.UFUNC_RULES or c in trace.FUNCTION_RULES, (r.name, c)


# ---- per-row checks ----------------------------------------------------------------------------
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_forward(row: Row):
    """tj.vjp's (traced, interpreted) output equals numpy's: dtype, shape and values."""
    for dtype in row.dtypes:
        for args in row.samples(dtype):
            expected = _reference(row, args)
            got = tj.vjp(row.fn, *args)[0]
            _assert_same(got, expected, 1e-12 if dtype == F64 else 1e-5,
                         f"{row.name} {dtype} {[a.shape for a in args]}")
    if row.int_fn is not None:
        rng = _rng(row, "int")
        for shapes in row.shapes:
            args = [rng.integers(-3, 4, size=s) for s in shapes]
            tape = tj.make_tape(row.int_fn)(*args)
            got = interpret(tape, args)
            _assert_same(got, _reference_int(row, args), 1e-12, f"{row.name} int64")


@pytest.mark.parametrize("row", DIFF, ids=[r.name for r in DIFF])
def test_grad_fd(row: Row):
    """float64 reverse mode agrees with central differences (random direction, cotangent)."""
    for args in row.samples(F64):
        check_vjp(row.fn, args, rtol=row.rtol, atol=row.atol, h=row.h)
        out, vjp_fn = tj.vjp(row.fn, *args)
        grads = vjp_fn(_cotangent(out, _rng(row, "shape")))
        for g, a in zip(grads, args):
            assert np.shape(g) == a.shape and np.asarray(g).dtype == a.dtype


@pytest.mark.parametrize("row", [r for r in ROWS if not r.diff or r.expect_grad],
                         ids=[r.name for r in ROWS if not r.diff or r.expect_grad])
def test_grad_documented(row: Row):
    """Non-differentiable rows give zero gradients; tie rows give the rule's documented split."""
    for args in row.samples(F64):
        out, vjp_fn = tj.vjp(row.fn, *args)
        ct = _cotangent(out, _rng(row, "ct"))
        grads = vjp_fn(ct)
        expected = (row.expect_grad(ct, *args) if row.expect_grad
                    else [np.zeros_like(a) for a in args])
        for g, e, a in zip(grads, expected, args):
            assert np.shape(g) == a.shape and np.asarray(g).dtype == a.dtype
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("row", [r for r in ROWS if F32 in r.dtypes],
                         ids=[r.name for r in ROWS if F32 in r.dtypes])
def test_float32(row: Row):
    """float32 stays float32 (forward checks numpy's dtype); gradients are float32 and agree
    with the float64 gradients at the same point."""
    for args32 in row.samples(F32):
        args64 = [a.astype(F64) for a in args32]
        out32, vjp32 = tj.vjp(row.fn, *args32)
        out64, vjp64 = tj.vjp(row.fn, *args64)
        ct64 = _cotangent(out64, _rng(row, "f32"))
        ct32 = [c.astype(np.asarray(o).dtype) for c, o in zip(_leaves(ct64), _leaves(out32))]
        ct32 = ct32[0] if not isinstance(out32, (list, tuple)) else type(out32)(ct32)
        for g32, g64, a in zip(vjp32(ct32), vjp64(ct64), args32):
            assert np.asarray(g32).dtype == np.float32, f"gradient dtype {np.asarray(g32).dtype}"
            scale = max(1.0, float(np.max(np.abs(g64), initial=0.0)))
            np.testing.assert_allclose(g32, g64, rtol=row.f32_rtol, atol=row.f32_rtol * scale)


@pytest.mark.parametrize("row", GRAD2, ids=[r.name for r in GRAD2])
def test_grad2_fd(row: Row):
    """Second order: the gradient of <grad(sum f), w> matches central differences."""
    for args in row.samples(F64):
        n = len(args)
        rng = _rng(row, "w")
        weights = [rng.standard_normal(a.shape) for a in args]
        inner = tj.grad(lambda *xs: np.sum(row.fn(*xs)), argnums=tuple(range(n)))

        def first(*xs):
            return sum(np.sum(g * w) for g, w in zip(inner(*xs), weights))

        check_grads(first, args, argnums=tuple(range(n)), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_tape(row: Row):
    """The traced tape and the joint (value + VJP) tape typecheck and survive print/parse; a
    primitive's row really records its primitive."""
    args = row.samples(F64)[0]
    tape = tj.make_tape(row.fn)(*args)
    seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars]
    joint = autodiff.vjp_tape(tape, range(len(args)), seeds)
    for t in (tape, joint):
        tj.typecheck(t)
        assert tj.parse_tape(tj.print_tape(t), consts=t.consts) == t
    if row.prim is not None:
        assert row.prim in {e.op for e in tape.eqns}, f"the tape has no {row.prim}:\n{tape}"
