"""jacfwd, jacrev, hessian, linearize and vjp (issue 22): forward- and reverse-mode Jacobians
against each other and central differences (pytrees, argnums tuples, has_aux, square and
non-square, size-1, size-0 and 0-d arguments), the Hessian against finite differences of the
gradient and jacobian(grad), and the two-program transforms: `f_jvp` and `vjp_fn` run no eqn
of the forward computation, on residuals computed once, one compiled program per signature.
Every call is compiled and checked against the interpreter (conftest.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ir import sub_tapes
from tapejit.pytree import flatten, unflatten

H = 1e-6


def numeric_jacobian(f, x):
    """Central differences in float64: shape out.shape + x.shape."""
    x = np.asarray(x, np.float64)
    cols = [(np.asarray(f(x + H * e.reshape(x.shape))) - np.asarray(f(x - H * e.reshape(x.shape))))
            / (2 * H) for e in np.eye(x.size)]
    return np.moveaxis(np.array(cols).reshape((x.size,) + np.shape(f(x))), 0, -1).reshape(
        np.shape(f(x)) + x.shape)


def ops_of(tape) -> list[str]:
    """Every eqn's op, in fused groups and control-flow bodies too."""
    return [op for e in tape.eqns
            for op in [e.op] + [o for _, body in sub_tapes(e) for o in ops_of(body)]]


FORWARD_OPS = {"sin", "cos", "exp", "tanh", "log"}     # what the test functions compute


def assert_trees_close(a, b, **kw):
    la, ta = flatten(a)
    lb, tb = flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(x, y, **kw)


# ---- jacfwd == jacrev == finite differences ----------------------------------------------------
def model(p, x):
    """A pytree in, a pytree out, non-square: p = {w: (3, 2), b: (3,)}, x: (2,)."""
    y = np.tanh(p["w"] @ x + p["b"])
    return {"y": y, "s": np.sum(np.exp(y) * x[0])}


def square(x, y):
    """(4,) and size-1 (1,) in, (4,) out (square in x), an aux."""
    return np.sin(x) * y + x[::-1] ** 2, {"n": np.sum(x), "k": 3}


def empty(x, z, a):
    """Size-0 argument and output, a 0-d (Python float) argument."""
    return {"v": np.cos(x) * a + np.sum(z) * x, "z": 2.0 * z * a}


MODEL_ARGS = ({"w": np.arange(6.0).reshape(3, 2) / 7 - 0.4, "b": np.array([0.1, -0.2, 0.3])},
              np.array([0.5, -1.5]))
jac_model = {m: f(model, argnums=(0, 1)) for m, f in (("fwd", tj.jacfwd), ("rev", tj.jacrev))}
jac_square = {m: f(square, argnums=(0, 1), has_aux=True)
              for m, f in (("fwd", tj.jacfwd), ("rev", tj.jacrev))}
jac_empty = {m: f(empty, argnums=(0, 1, 2)) for m, f in (("fwd", tj.jacfwd), ("rev", tj.jacrev))}


def fd_blocks(f, args, argnums):
    """{out leaf path: [block per argnum leaf]} by central differences, flattened."""
    blocks = []
    for i in argnums:
        leaves, td = flatten(args[i])
        for k, leaf in enumerate(leaves):
            def g(v, i=i, k=k):
                new = list(leaves)
                new[k] = v
                full = list(args)
                full[i] = unflatten(td, new)
                return flatten(f(*full))[0]
            blocks.append([numeric_jacobian(lambda v, j=j: g(v)[j], leaf)
                           for j in range(len(flatten(f(*args))[0]))])
    return blocks


def check_against_fd(jac, f, args, argnums):
    """jac (out structure of tuples of arg structures) against central differences."""
    out_leaves = flatten(f(*args))[0]
    want = fd_blocks(f, args, argnums)       # [arg leaf][out leaf]
    got = flatten(jac)[0]                    # out leaf major, then arg leaves
    n_arg = len(want)
    assert len(got) == len(out_leaves) * n_arg
    for o in range(len(out_leaves)):
        for a in range(n_arg):
            np.testing.assert_allclose(got[o * n_arg + a], want[a][o], rtol=1e-6, atol=1e-8)


def test_jacfwd_equals_jacrev_and_finite_differences_on_pytrees():
    p, x = MODEL_ARGS
    fwd, rev = jac_model["fwd"](p, x), jac_model["rev"](p, x)
    assert fwd["y"][0]["w"].shape == (3, 3, 2) and fwd["s"][1].shape == (2,)
    assert isinstance(fwd["y"], tuple) and set(fwd["y"][0]) == {"w", "b"}
    assert_trees_close(fwd, rev, rtol=1e-12, atol=1e-14)
    check_against_fd(fwd, model, (p, x), (0, 1))
    # a later call with new values: the same programs, new results
    p2 = {"w": p["w"] * -1.3, "b": p["b"] + 0.5}
    for m in ("fwd", "rev"):
        before = jac_model[m].cache_info()
        check_against_fd(jac_model[m](p2, x[::-1].copy()), model, (p2, x[::-1].copy()), (0, 1))
        after = jac_model[m].cache_info()
        assert after["traces"] == before["traces"] == 1
        assert after["compiles"] + after["disk_loads"] == 1


def test_jacfwd_square_size_one_and_has_aux():
    x, y = np.array([0.3, -0.7, 1.1, 2.0]), np.array([1.5])
    (jx, jy), aux = jac_square["fwd"](x, y)
    (rx, ry), raux = jac_square["rev"](x, y)
    assert jx.shape == (4, 4) and jy.shape == (4, 1)
    assert aux["k"] == 3 and raux["k"] == 3
    np.testing.assert_allclose(aux["n"], np.sum(x))
    np.testing.assert_allclose(jx, rx, rtol=1e-12)
    np.testing.assert_allclose(jy, ry, rtol=1e-12)
    f = lambda x, y: square(x, y)[0]     # noqa: E731
    np.testing.assert_allclose(jx, np.diag(np.cos(x) * y) + np.diag(2 * x[::-1])[:, ::-1])
    check_against_fd((jx, jy), f, (x, y), (0, 1))
    (jx2, _), _ = jac_square["fwd"](y * x, y + 1)            # later call
    np.testing.assert_allclose(jx2, numeric_jacobian(lambda v: f(v, y + 1), y * x), rtol=1e-6,
                               atol=1e-8)


def test_jacfwd_size_zero_and_scalar_arguments():
    x, z, a = np.array([0.2, 0.4, -1.0]), np.zeros(0), 0.75
    for m in ("fwd", "rev"):
        for _ in range(2):                                   # first and later call
            jac = jac_empty[m](x, z, a)
            assert jac["v"][0].shape == (3, 3) and jac["v"][1].shape == (3, 0)
            assert jac["v"][2].shape == (3,) and jac["z"][0].shape == (0, 3)
            assert jac["z"][1].shape == (0, 0) and jac["z"][2].shape == (0,)
            np.testing.assert_allclose(jac["v"][0], np.diag(-np.sin(x) * a))
            np.testing.assert_allclose(jac["v"][2], np.cos(x))
            np.testing.assert_allclose(jac["v"][2],
                                       numeric_jacobian(lambda b: empty(x, z, b)["v"], a),
                                       rtol=1e-7)


# ---- hessian -----------------------------------------------------------------------------------
def energy(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + np.sum(np.sin(x) * x)


hess = tj.hessian(energy)
grad_energy = tj.grad(energy)
rev_over_rev = tj.jacobian(grad_energy)


def test_hessian_against_finite_differences_and_jacobian_of_grad():
    for x in (np.array([0.5, -0.3, 1.2, 0.8, 0.1]), np.array([1.0, 1.0, 1.0, 1.0, -2.0])):
        h = hess(x)
        assert h.shape == (5, 5)
        np.testing.assert_allclose(h, h.T, rtol=1e-12)
        np.testing.assert_allclose(h, numeric_jacobian(grad_energy, x), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(h, rev_over_rev(x), rtol=1e-12, atol=1e-12)
    assert hess.cache_info()["traces"] == 1


def test_hessian_argnums_tuple_and_aux():
    def f(x, y):
        return np.sum(x ** 2 * y[0]) + y[1] ** 3, x[0]

    x, y = np.array([1.0, 2.0]), np.array([3.0, 0.5])
    (hxx, hxy), (hyx, hyy) = tj.hessian(f, argnums=(0, 1), has_aux=True)(x, y)[0]
    np.testing.assert_allclose(hxx, 2 * y[0] * np.eye(2))
    np.testing.assert_allclose(hxy, [[2 * x[0], 0], [2 * x[1], 0]])
    np.testing.assert_allclose(hyx, hxy.T)
    np.testing.assert_allclose(hyy, [[0, 0], [0, 6 * y[1]]])


# ---- linearize ---------------------------------------------------------------------------------
def net(x, w):
    h = np.tanh(w @ x)
    return {"h": h, "e": np.sum(np.exp(h) * np.sin(x[:2]))}


def test_linearize_matches_jvp_and_runs_no_forward_eqn():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(3), rng.standard_normal((2, 3))
    out, f_jvp = tj.linearize(net, x, w)
    assert_trees_close(out, net(x, w), rtol=1e-12)
    for _ in range(3):                                       # several tangents, one program
        t = (rng.standard_normal(3), rng.standard_normal((2, 3)))
        assert_trees_close(f_jvp(*t), tj.jvp(net, (x, w), t)[1], rtol=1e-10, atol=1e-12)
    info = f_jvp.cache_info()
    assert info["traces"] == 1 and info["compiles"] + info["disk_loads"] == 1 and info["hits"] == 2
    linear = ops_of(f_jvp.tape)
    assert not FORWARD_OPS & set(linear), linear              # only products and sums
    # finite differences of the forward along t
    t = (rng.standard_normal(3), rng.standard_normal((2, 3)))
    fd = {k: (net(x + H * t[0], w + H * t[1])[k] - net(x - H * t[0], w - H * t[1])[k]) / (2 * H)
          for k in ("h", "e")}
    assert_trees_close(f_jvp(*t), fd, rtol=1e-6, atol=1e-8)
    # a new primal point with the same signature: no new program for either half
    out2, f_jvp2 = tj.linearize(net, x * 2, w)
    assert_trees_close(f_jvp2(*t), tj.jvp(net, (x * 2, w), t)[1], rtol=1e-10, atol=1e-12)
    assert f_jvp2.cache_info()["traces"] == 1 and f_jvp2.cache_info()["hits"] == 4


def test_linearize_has_aux_and_integer_arguments():
    def f(x, n):
        return x * n, np.max(x)

    out, f_jvp, aux = tj.linearize(f, np.array([1.0, 3.0]), 2, has_aux=True)
    np.testing.assert_allclose(out, [2.0, 6.0])
    assert aux == 3.0
    np.testing.assert_allclose(f_jvp(np.array([1.0, -1.0]), 0), [2.0, -2.0])


# ---- vjp: residuals once ------------------------------------------------------------------------
def test_vjp_fn_reuses_residuals_and_runs_no_forward_eqn():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal(3), rng.standard_normal((2, 3))
    out, vjp_fn = tj.vjp(net, x, w)
    assert_trees_close(out, net(x, w), rtol=1e-12)
    weighted = tj.grad(lambda x, w, ct: np.sum(net(x, w)["h"] * ct["h"]) + net(x, w)["e"]
                       * ct["e"], argnums=(0, 1))
    for _ in range(3):
        ct = {"h": rng.standard_normal(2), "e": rng.standard_normal()}
        assert_trees_close(vjp_fn(ct), weighted(x, w, ct), rtol=1e-10, atol=1e-12)
    reverse = ops_of(vjp_fn.tape)
    assert not FORWARD_OPS & set(reverse), reverse
    info = vjp_fn.cache_info()
    assert info["traces"] == 1 and info["compiles"] + info["disk_loads"] == 1 and info["hits"] == 2
    # the residuals are this call's: changing the arguments in place later changes nothing
    ct = {"h": np.ones(2), "e": 1.0}
    want = vjp_fn(ct)
    x[:] = 7.0
    w[:] = -1.0
    assert_trees_close(vjp_fn(ct), want, rtol=0)
    # a vjp_fn of another call of the same signature: the same programs
    _, vjp_fn2 = tj.vjp(net, x, w)
    assert_trees_close(vjp_fn2(ct), weighted(x, w, ct), rtol=1e-10, atol=1e-12)
    assert vjp_fn2.cache_info()["traces"] == 1


# ---- errors --------------------------------------------------------------------------------------
def test_errors_name_the_transform_and_the_fix():
    x = np.ones(3)
    with pytest.raises(tj.DtypeError, match=r"jacfwd: argument x has dtype int64.*floats"):
        tj.jacfwd(lambda x: x * 2)(np.arange(3))
    with pytest.raises(tj.DtypeError, match=r"argument x: tapejit does not support dtype "
                                             r"complex128"):
        tj.jacrev(lambda x: x * 2)(x + 1j)
    with pytest.raises(tj.ArgumentError, match=r"jacfwd: .* returned a i64\[3\] output; only "
                                               r"float outputs.*has_aux=True") as info:
        tj.jacfwd(lambda x: np.argsort(x))(x)
    assert "test_jacfwd.py" in str(info.value)
    with pytest.raises(tj.ArgumentError, match="has_aux=True the function must return a pair"):
        tj.jacfwd(lambda x: x, has_aux=True)(x)
    with pytest.raises(tj.ArgumentError, match="argnums 2 is out of range"):
        tj.jacfwd(lambda x: x, argnums=2)(x)
    _, f_jvp = tj.linearize(np.sin, x)
    with pytest.raises(tj.ArgumentError, match=r"f_jvp: tangent x has shape \(4,\), but its "
                                               r"primal has shape \(3,\)") as info:
        f_jvp(np.ones(4))
    assert "test_jacfwd.py" in str(info.value)
    with pytest.raises(tj.ArgumentError, match="f_jvp: 2 tangents for 1 primals"):
        f_jvp(x, x)
    with pytest.raises(tj.DtypeError, match="vjp: argument x has dtype int64"):
        tj.vjp(np.sin, np.arange(3))
