"""GradientTape and Variable: TensorFlow's semantics, one test per method and argument, and
the compiled replay of a recorded training step (counted events)."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from test_transforms import numeric_jacobian

X = np.array([0.3, -0.5, 1.2])


def f(x):
    return np.sum(np.sin(x) * x)


def df(x):
    return np.cos(x) * x + np.sin(x)


def test_watch_returns_the_value_to_compute_with():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        y = f(x)
        assert float(y) == pytest.approx(f(X))       # recorded values are concrete
        assert bool(y > 0)
    np.testing.assert_allclose(tape.gradient(y, x), df(X))


def test_gradient_matches_finite_differences():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        y = np.sum(np.exp(np.tanh(x) * x[::-1]))
    g = tape.gradient(y, x)
    np.testing.assert_allclose(
        g, numeric_jacobian(lambda v: np.sum(np.exp(np.tanh(v) * v[::-1])), X), rtol=1e-6)


def test_second_gradient_on_non_persistent_tape_is_an_error():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        y = f(x)
    tape.gradient(y, x)
    assert tape._trace is None and not tape._watched       # what it held is freed
    with pytest.raises(tj.TapeError, match="persistent=True"):
        tape.gradient(y, x)


def test_persistent_tape_serves_several_calls():
    with tj.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        y = f(x)
        z = np.sum(x ** 2)
    np.testing.assert_allclose(tape.gradient(y, x), df(X))
    np.testing.assert_allclose(tape.gradient(z, x), 2 * X)


def test_a_source_never_watched_is_an_error():
    with tj.GradientTape() as tape:
        y = f(tape.watch(X))
    with pytest.raises(tj.ArgumentError, match="never watched"):
        tape.gradient(y, X)


def test_unconnected_sources_with_both_policies():
    with tj.GradientTape(persistent=True) as tape:
        x, u = tape.watch(X), tape.watch(np.ones(2))
        y = f(x)
    assert tape.gradient(y, [x, u])[1] is None
    assert tape.gradient(y, u, unconnected_gradients="zero").tolist() == [0.0, 0.0]
    with pytest.raises(tj.ArgumentError, match="unconnected_gradients"):
        tape.gradient(y, u, unconnected_gradients="zeros")


def test_targets_and_sources_as_lists_and_dicts():
    with tj.GradientTape() as tape:
        p = tape.watch({"a": X, "b": np.array(2.0)})
        targets = {"first": f(p["a"]), "rest": [p["b"] * np.sum(p["a"]), p["b"] ** 2]}
    g = tape.gradient(targets, p)                  # the gradient of the sum of the targets
    np.testing.assert_allclose(g["a"], df(X) + 2.0)
    assert np.isclose(g["b"], np.sum(X) + 4.0)


def test_output_gradients_weight_the_targets():
    w = np.array([1.0, -2.0, 0.5])
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        y = np.sin(x)
    np.testing.assert_allclose(tape.gradient(y, x, output_gradients=w), w * np.cos(X))


def test_jacobian_and_batch_jacobian():
    with tj.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        y = np.tanh(x[:, None] * x[None, :])
        xb = tape.watch(np.arange(6.0).reshape(3, 2) / 4)
        yb = np.concatenate([np.sin(xb), xb ** 2], axis=1)       # (3, 4), rows independent
    np.testing.assert_allclose(tape.jacobian(y, x),
                               numeric_jacobian(lambda v: np.tanh(v[:, None] * v[None, :]), X),
                               rtol=1e-6, atol=1e-9)
    batch = tape.batch_jacobian(yb, xb)
    assert batch.shape == (3, 4, 2)
    row = np.asarray(xb)[1]
    np.testing.assert_allclose(
        batch[1], numeric_jacobian(lambda v: np.concatenate([np.sin(v), v ** 2]), row),
        rtol=1e-6, atol=1e-9)


def test_stop_recording_makes_constants():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        with tape.stop_recording():
            z = x * 2
        y = np.sum(z * x)
    np.testing.assert_allclose(tape.gradient(y, x), 2 * X)


def test_reset_forgets_what_was_recorded():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        y = f(x)
        tape.reset()
        x2 = tape.watch(X * 2)
        z = np.sum(x2 ** 2)
    assert tape.gradient([y, z], [x, x2])[0] is None


def test_nested_tapes_give_second_order():
    with tj.GradientTape() as outer:
        x = outer.watch(np.array(0.7))
        with tj.GradientTape() as inner:
            inner.watch(x)
            y = np.sin(x) * x ** 2
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    assert np.isclose(dy, np.cos(0.7) * 0.49 + 1.4 * np.sin(0.7))
    assert np.isclose(d2y, tj.grad(tj.grad(lambda s: np.sin(s) * s ** 2))(0.7))


def test_inner_tape_does_not_see_what_it_did_not_watch():
    with tj.GradientTape() as outer:
        x = outer.watch(X)
        with tj.GradientTape() as inner:
            y = f(x)
        assert inner.gradient(y, x) is None
    np.testing.assert_allclose(outer.gradient(y, x), df(X))


def test_variables_are_watched_automatically():
    w = tj.Variable(np.array([1.0, 2.0, 3.0]), name="w")
    frozen = tj.Variable(2.0, name="frozen", trainable=False)
    with tj.GradientTape() as tape:
        y = np.sum(w * X) * frozen
    assert tape.watched_variables() == (w,)
    gw, gf = tape.gradient(y, [w, frozen])
    np.testing.assert_allclose(gw, 2 * X)
    assert gf is None


def test_watch_accessed_variables_false_and_explicit_watch():
    w, v = tj.Variable(np.ones(3), name="w"), tj.Variable(np.ones(3), name="v")
    with tj.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(v)
        y = np.sum(w * v * X)
    assert tape.watched_variables() == (v,)
    gw, gv = tape.gradient(y, [w, v])
    assert gw is None
    np.testing.assert_allclose(gv, X)


def test_variable_api():
    v = tj.Variable([1.0, 2.0], name="v")
    assert (v.shape, v.dtype, v.trainable, v.name) == ((2,), np.float64, True, "v")
    v.assign([3.0, 4.0]).assign_add(1.0).assign_sub([0.5, 0.5])
    np.testing.assert_allclose(v.numpy(), [3.5, 4.5])
    np.testing.assert_allclose(np.exp(v) + v.T @ v - v[0], np.exp([3.5, 4.5]) + 32.5 - 3.5)
    with pytest.raises(tj.ShapeError, match="shape"):
        v.assign(np.ones(3))
    counter = tj.Variable(np.zeros(3, np.int64))          # (numpy's `-=` refuses it too)
    with pytest.raises(tj.DtypeError, match="cannot assign a float64 value to a int64"):
        counter.assign_sub(np.full(3, 0.7))
    np.testing.assert_array_equal(counter.assign_add(2).numpy(), [2, 2, 2])
    with pytest.raises(tj.ArgumentError, match="argument"):
        tj.jit(lambda x: x * v)(np.ones(2))


def _sgd_step(w, x):
    with tj.GradientTape() as tape:
        tape.watch(w)
        loss = np.sum(np.sin(x * w))
    return w - 0.1 * tape.gradient(loss, w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_tape_inside_jit_compiles_the_whole_step(backend):
    step = tj.jit(_sgd_step, backend=backend)
    np.testing.assert_allclose(step(np.ones(3), X), 1 - 0.1 * X * np.cos(X))
    step(np.ones(3) * 2, X)
    info = step.cache_info()
    assert info["traces"] == 1
    assert info["compiles"] + info["disk_loads"] == (backend == "numba")


def _mlp_step(params, x, y, backend):
    with tj.GradientTape(backend=backend) as tape:
        h = np.tanh(x @ params[0] + params[1])
        loss = np.mean((h @ params[2] - y) ** 2)
    grads = tape.gradient(loss, params)
    for p, g in zip(params, grads):
        p.assign_sub(0.1 * g)
    return float(loss)


def test_second_step_of_a_recorded_training_loop_compiles_nothing():
    rng = np.random.default_rng(0)
    params = [tj.Variable(rng.standard_normal((4, 8)) * 0.3, name="w1"),
              tj.Variable(np.zeros(8), name="b1"),
              tj.Variable(rng.standard_normal((8, 1)) * 0.3, name="w2")]
    x, y = rng.standard_normal((16, 4)), rng.standard_normal((16, 1))
    first = _mlp_step(params, x, y, "numba")
    before = tj.tape_cache_info("numba")
    losses = [_mlp_step(params, x, y, "numba") for _ in range(3)]
    after = tj.tape_cache_info("numba")
    assert (after["traces"], after["compiles"]) == (before["traces"], before["compiles"])
    assert after["hits"] == before["hits"] + 3
    assert losses[-1] < first


def test_gradient_with_no_recording_is_an_error():
    tape = tj.GradientTape()
    with pytest.raises(tj.TapeError, match="recorded nothing"):
        tape.gradient(np.ones(2), np.ones(2))
    with pytest.raises(tj.TapeError, match="inside the tape"):
        tape.watch(np.ones(2))


def test_a_recorded_value_closed_over_after_the_tape_is_a_constant():
    """`x = tape.watch(x)` rebinds x; a transform made after the tape ended and closing over x
    took the tape's trace for its own (both at level 0): jacobian gave zeros, grad raised. The
    open trace records; the recorded value is a constant there."""
    x0, b = np.array([1.0, 2.0]), np.array([0.5, 0.5])
    with tj.GradientTape() as tape:
        x = tape.watch(x0)
        loss = np.sum(x ** 2)
    np.testing.assert_allclose(tape.gradient(loss, x), 2 * x0)
    want = np.diag(x0 * (1 - np.tanh(x0 * b) ** 2))
    for transform in (tj.jacobian, tj.jacrev, tj.jacfwd):
        for _ in range(2):
            np.testing.assert_allclose(transform(lambda b: np.tanh(x * b))(b), want)
    np.testing.assert_allclose(tj.grad(lambda b: np.sum(np.tanh(x * b)))(b), np.diag(want))
    np.testing.assert_allclose(tj.vmap(lambda b: x * b)(np.stack([b, 2 * b])),
                               [x0 * b, 2 * x0 * b])
    np.testing.assert_allclose(tj.hessian(lambda b: np.sum(x * b ** 3))(b), np.diag(6 * x0 * b))
