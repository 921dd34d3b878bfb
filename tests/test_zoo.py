"""The zoo of user programs on the numpy interpreter: values against plain numpy, gradients
against finite differences, second order (Hessian-vector products via grad of a dot of grad), and
float32 staying float32."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads
from tapejit.pytree import flatten
from zoo import ZOO, ZooProgram

SECOND_ORDER = [p for p in ZOO if p.second_order]


def _scalar(program: ZooProgram):
    """The program as a scalar function (dropping the aux output)."""
    if not program.has_aux:
        return program.fn
    return lambda *args: program.fn(*args)[0]


def _assert_tree_close(got: Any, want: Any, rtol: float, atol: float) -> None:
    got_leaves, got_td = flatten(got)
    want_leaves, want_td = flatten(want)
    assert got_td == want_td
    for g, w in zip(got_leaves, want_leaves):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("program", ZOO, ids=repr)
def test_value_matches_numpy(program: ZooProgram) -> None:
    args = program.make_args()
    value, _ = tj.value_and_grad(program.fn, program.argnums, has_aux=program.has_aux)(*args)
    _assert_tree_close(value, program.fn(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("program", ZOO, ids=repr)
def test_gradient_matches_finite_differences(program: ZooProgram) -> None:
    args = program.make_args()
    check_grads(_scalar(program), args, program.argnums, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("program", ZOO, ids=repr)
def test_gradient_structure(program: ZooProgram) -> None:
    args = program.make_args()
    grads = tj.grad(program.fn, program.argnums, has_aux=program.has_aux)(*args)
    if program.has_aux:
        grads, _ = grads
    for g, i in zip(grads, program.argnums):
        g_leaves, g_td = flatten(g)
        a_leaves, a_td = flatten(args[i])
        assert g_td == a_td
        for gl, al in zip(g_leaves, a_leaves):
            assert isinstance(gl, np.ndarray) and gl.shape == al.shape and gl.dtype == al.dtype
            assert np.all(np.isfinite(gl))


def _tree_dot(a: Any, b: Any) -> Any:
    return sum(np.sum(x * y) for x, y in zip(flatten(a)[0], flatten(b)[0]))


@pytest.mark.parametrize("program", SECOND_ORDER, ids=repr)
def test_hessian_vector_product(program: ZooProgram) -> None:
    """grad of <grad f(x), v> is H v: check it against finite differences of that function."""
    args = program.make_args()
    n, k = len(args), len(program.argnums)
    grad_fn = tj.grad(_scalar(program), program.argnums)
    rng = np.random.default_rng(7)
    vs = tuple(rng.standard_normal(np.shape(args[i])) for i in program.argnums)

    def grad_dot_v(*args_and_vs: Any) -> Any:
        grads = grad_fn(*args_and_vs[:n])
        return sum(_tree_dot(g, v) for g, v in zip(grads, args_and_vs[n:]))

    assert len(vs) == k
    check_grads(grad_dot_v, (*args, *vs), program.argnums, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("program", ZOO, ids=repr)
def test_float32_stays_float32(program: ZooProgram) -> None:
    args32, args64 = program.make_args(np.float32), program.make_args(np.float64)
    vg = tj.value_and_grad(program.fn, program.argnums, has_aux=program.has_aux)
    value32, grads32 = vg(*args32)
    value64, grads64 = vg(*args64)
    if program.has_aux:
        (value32, aux32), (value64, _) = value32, value64
        assert all(np.asarray(a).dtype == np.float32 for a in flatten(aux32)[0])
    assert np.asarray(value32).dtype == np.float32
    assert np.asarray(value32).dtype == np.asarray(_scalar(program)(*args32)).dtype
    np.testing.assert_allclose(value32, value64, rtol=2e-4, atol=1e-5)
    for g32, g64 in zip(flatten(grads32)[0], flatten(grads64)[0]):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-4)
