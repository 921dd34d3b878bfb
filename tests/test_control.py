"""Control flow (tapejit/control/): cond, switch, fori_loop, scan, while_loop, checkpoint.

Gradients against float64 finite differences and against the same computation unrolled in
Python; nested loops and loops under grad of grad; while_loop gradients against the analytic
derivative of a fixed point; checkpointed and stored reverse sweeps agree and the checkpointed
one keeps less memory (tracemalloc on the interpreter); the numba backend agrees with the
interpreter and compiles once whatever the number of steps.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads

P = np.array([1.1, 0.4, 0.1, 0.4])     # Lotka-Volterra: prey growth, predation, ...
DT = 0.01


def lv_step(p, x, y):
    return x + DT * (p[0] * x - p[1] * x * y), y + DT * (p[2] * x * y - p[3] * y)


def lv_loop(p, steps=40, checkpoints=None):
    x, y = tj.fori_loop(0, steps, lambda i, c: lv_step(p, *c), (1.0, 2.0),
                        checkpoints=checkpoints)
    return (x - 1.5) ** 2 + y


def lv_unrolled(p, steps=40):
    x, y = 1.0, 2.0
    for _ in range(steps):
        x, y = lv_step(p, x, y)
    return (x - 1.5) ** 2 + y


# ---- fori_loop ---------------------------------------------------------------------------------
def test_fori_loop_value_and_grad_match_unrolled_and_fd():
    value, grad = tj.value_and_grad(lv_loop)(P)
    value_u, grad_u = tj.value_and_grad(lv_unrolled)(P)
    np.testing.assert_allclose(value, value_u, rtol=1e-13)
    np.testing.assert_allclose(grad, grad_u, rtol=1e-12)
    check_grads(lv_loop, [P])


def test_fori_loop_uses_the_index_and_runs_eagerly():
    def f(x):
        return tj.fori_loop(2, 6, lambda i, c: c * x + i, x)

    def unrolled(x):
        c = x
        for i in range(2, 6):
            c = c * x + i
        return c

    x = np.array([0.5, -1.2])
    np.testing.assert_allclose(f(x), unrolled(x))        # outside a trace: runs at once
    np.testing.assert_allclose(tj.vjp(f, x)[1](np.ones(2))[0],
                               tj.vjp(unrolled, x)[1](np.ones(2))[0], rtol=1e-13)


def test_trace_size_does_not_grow_with_steps():
    short = tj.make_tape(lambda p: lv_loop(p, 10))(P)
    long = tj.make_tape(lambda p: lv_loop(p, 100_000))(P)
    assert len(short.eqns) == len(long.eqns)
    assert [e.op for e in long.eqns].count("scan") == 1


def test_run_time_upper_bound():
    def f(p, n):
        return tj.fori_loop(0, n, lambda i, x: x * p + 0.1, 1.0)

    g = tj.grad(f)
    for n in (0, 1, 7):
        expected = tj.grad(lambda p: f(p, n))(0.9)
        np.testing.assert_allclose(g(0.9, n), expected, rtol=1e-13)
    assert g.cache_info()["traces"] == 1        # n is a run-time value: one tape for all


# ---- scan --------------------------------------------------------------------------------------
def rnn(w, xs, reverse=False, checkpoints=None):
    h, ys = tj.scan(lambda h, x: (np.tanh(w * h + x), h * x), np.zeros(3), xs,
                    reverse=reverse, checkpoints=checkpoints)
    return np.sum(h) + np.sum(ys ** 2)


def rnn_unrolled(w, xs, reverse=False):
    h, ys = np.zeros(3), [None] * len(xs)
    for k in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        ys[k] = h * xs[k]
        h = np.tanh(w * h + xs[k])
    return np.sum(h) + np.sum(np.stack(ys) ** 2)


W = np.array([0.5, -0.3, 0.8])
XS = np.random.default_rng(0).normal(size=(9, 3))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_grad_matches_unrolled_and_fd(reverse):
    g = tj.grad(lambda w, xs: rnn(w, xs, reverse), argnums=(0, 1))(W, XS)
    g_u = tj.grad(lambda w, xs: rnn_unrolled(w, xs, reverse), argnums=(0, 1))(W, XS)
    for a, b in zip(g, g_u):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    check_grads(lambda w, xs: rnn(w, xs, reverse), [W, XS], argnums=(0, 1))


def test_scan_pytrees_and_length():
    def f(a):
        (s, t), ys = tj.scan(lambda c, _: ((c[0] + a, c[1] * a), {"s": c[0]}), (0.0, 1.0),
                             length=4)
        return s + t + np.sum(ys["s"])
    # s_k = k a, t = a^4, ys = 0 + a + 2a + 3a
    np.testing.assert_allclose(f(0.5), 4 * 0.5 + 0.5 ** 4 + 6 * 0.5)
    np.testing.assert_allclose(tj.grad(f)(0.5), 4 + 4 * 0.5 ** 3 + 6)


# ---- nested loops, grad of grad ----------------------------------------------------------------
def nested(p):
    def outer(i, c):
        return tj.fori_loop(0, 3, lambda j, d: d * p[0] + np.sin(d) * p[1], c + i * p[2])
    return np.sum(tj.fori_loop(0, 4, outer, np.array([0.3, 0.1])))


def nested_unrolled(p):
    c = np.array([0.3, 0.1])
    for i in range(4):
        c = c + i * p[2]
        for _ in range(3):
            c = c * p[0] + np.sin(c) * p[1]
    return np.sum(c)


Q = np.array([0.7, 0.2, 0.05])


def test_nested_loops():
    np.testing.assert_allclose(tj.grad(nested)(Q), tj.grad(nested_unrolled)(Q), rtol=1e-12)
    check_grads(nested, [Q])


@pytest.mark.parametrize("f, unrolled", [(lv_loop, lv_unrolled), (nested, nested_unrolled)])
def test_grad_of_grad_through_loops(f, unrolled):
    p = P if f is lv_loop else Q
    weights = np.arange(1.0, len(p) + 1)

    def inner(f):
        return lambda p: np.sum(tj.grad(f)(p) * weights)

    np.testing.assert_allclose(tj.grad(inner(f))(p), tj.grad(inner(unrolled))(p), rtol=1e-10)
    check_grads(inner(f), [p], rtol=1e-4)


# ---- while_loop --------------------------------------------------------------------------------
def fixed_point(a):
    """x = cos(a x), iterated to convergence: the trip count depends on a."""
    x, _ = tj.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-13,
                         lambda c: (np.cos(a * c[0]), c[0]), (np.float64(1.0), np.float64(0.0)))
    return x


@pytest.mark.parametrize("a", [0.3, 0.7, 1.2])
def test_while_loop_gradient_of_a_fixed_point_is_analytic(a):
    x = fixed_point(a)
    np.testing.assert_allclose(np.cos(a * x), x, atol=1e-12)
    # implicit function theorem: x' = -x sin(ax) / (1 + a sin(ax))
    expected = -x * np.sin(a * x) / (1 + a * np.sin(a * x))
    np.testing.assert_allclose(tj.grad(fixed_point)(a), expected, rtol=1e-9)


def test_while_loop_matches_unrolled_steps():
    def f(x):
        return tj.while_loop(lambda c: c[1] < 5, lambda c: (np.sin(c[0]) * x, c[1] + 1),
                             (x, 0))[0]

    def unrolled(x):
        c = x
        for _ in range(5):
            c = np.sin(c) * x
        return c

    x = np.array([0.4, 1.3])
    np.testing.assert_allclose(tj.vjp(f, x)[1](np.ones(2))[0],
                               tj.vjp(unrolled, x)[1](np.ones(2))[0], rtol=1e-13)


@pytest.mark.parametrize("checkpoints", [2, "binomial"])
def test_while_loop_checkpoints(checkpoints):
    def f(a, checkpoints):
        x, _ = tj.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-13,
                             lambda c: (np.cos(a * c[0]), c[0]),
                             (np.float64(1.0), np.float64(0.0)), checkpoints=checkpoints)
        return x

    g = tj.grad(f, static_argnums=1)
    np.testing.assert_allclose(g(0.7, checkpoints), g(0.7, None), rtol=1e-13)


def test_second_derivative_through_while_is_a_clear_error():
    with pytest.raises(tj.UnsupportedOperationError, match="run-time trip count"):
        tj.grad(tj.grad(fixed_point))(0.5)


# ---- cond, switch, where -----------------------------------------------------------------------
def piecewise(x):
    return np.sum(tj.cond(np.sum(x) > 0, lambda x: np.sin(x) * 2, lambda x: x ** 3, x))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_gradient_follows_the_taken_branch(sign):
    x = sign * np.array([1.0, 2.0])
    expected = 2 * np.cos(x) if sign > 0 else 3 * x ** 2
    np.testing.assert_allclose(tj.grad(piecewise)(x), expected, rtol=1e-13)
    check_grads(piecewise, [x])
    check_grads(lambda x: np.sum(tj.grad(piecewise)(x) ** 2), [x])


def test_switch_clamps_and_captures():
    scale = np.array([2.0, 3.0])
    fns = [lambda x: x * scale, lambda x: np.exp(x), lambda x: -x]
    for index, expected in [(-3, lambda x: x * scale), (1, np.exp), (7, lambda x: -x)]:
        x = np.array([0.1, 0.2])
        np.testing.assert_allclose(tj.jit(lambda i, x: tj.switch(i, fns, x))(index, x),
                                   expected(x))
        g = tj.grad(lambda x, i: np.sum(tj.switch(i, fns, x)))(x, index)
        np.testing.assert_allclose(g, tj.grad(lambda x: np.sum(expected(x)))(x))


def test_where_is_np_where():
    x = np.array([-1.0, 2.0])
    assert np.array_equal(tj.where(x > 0, x, 0.0), np.where(x > 0, x, 0.0))
    np.testing.assert_allclose(tj.grad(lambda x: np.sum(tj.where(x > 0, x, 0.0)))(x), [0, 1])


# ---- checkpoint --------------------------------------------------------------------------------
def test_checkpoint_same_gradients_and_recomputes():
    def block(x):
        return np.sin(np.exp(x)) * x

    ck = tj.checkpoint(block)
    x = np.array([0.1, 0.5, -0.3])
    f, f_ck = (lambda x: np.sum(block(block(x)))), (lambda x: np.sum(ck(ck(x))))
    np.testing.assert_allclose(tj.grad(f_ck)(x), tj.grad(f)(x), rtol=1e-13)
    check_grads(lambda x: np.sum(tj.grad(f_ck)(x) ** 2), [x], rtol=1e-4)
    joint = tj.make_tape(tj.grad(f_ck))(x)
    # the forward of the outer block is dead (grad only): 1 forward, 2 recomputing VJPs
    assert [e.op for e in joint.eqns].count("checkpoint") == 3


# ---- checkpointed reverse sweeps ----------------------------------------------------------------
@pytest.mark.parametrize("steps", [0, 1, 2, 7, 40])
@pytest.mark.parametrize("checkpoints", [1, 3, 40, "binomial"])
def test_checkpoint_policies_give_the_same_gradients(steps, checkpoints):
    plain = tj.grad(lambda p: lv_loop(p, steps))(P)
    np.testing.assert_allclose(tj.grad(lambda p: lv_loop(p, steps, checkpoints))(P), plain,
                               rtol=1e-13)


def test_checkpointed_scan_grad_matches_unrolled():
    for cp in (2, "binomial"):
        g = tj.grad(lambda w, xs: rnn(w, xs, True, cp), argnums=(0, 1))(W, XS)
        g_u = tj.grad(lambda w, xs: rnn_unrolled(w, xs, True), argnums=(0, 1))(W, XS)
        for a, b in zip(g, g_u):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def _full_tiers_in() -> None:
    """Wait for the full tiers compiling in the background (codegen/llvm/program.py)."""
    from tapejit.codegen.llvm import program
    with program._lock:
        pool = program._tier_thread()
    pool.submit(lambda: None).result()


def _peak_bytes(fn, *args) -> int:
    fn(*args)                                  # trace first: count the run only
    _full_tiers_in()                           # compiling meanwhile, they allocate too
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_checkpointed_sweep_keeps_less_memory():
    steps, width = 1500, 500                    # a stored sweep keeps steps * width floats

    def loss(w, checkpoints):
        h = tj.fori_loop(0, steps, lambda i, h: np.tanh(h * w) + 0.01, np.ones(width),
                         checkpoints=checkpoints)
        return np.sum(h)

    w = np.full(width, 0.9)
    peaks = {}
    grads = {}
    for cp in (None, 40, "binomial"):
        g = tj.grad(loss, static_argnums=1)
        peaks[cp] = _peak_bytes(g, w, cp)
        grads[cp] = g(w, cp)
    stored = steps * width * 8
    assert peaks[None] > stored
    assert peaks[40] < stored / 5             # 40 snapshots + a 38-step segment
    assert peaks["binomial"] < stored / 20     # 12 snapshots
    for cp in (40, "binomial"):
        np.testing.assert_allclose(grads[cp], grads[None], rtol=1e-13)


# ---- errors ------------------------------------------------------------------------------------
def test_carry_must_keep_its_dtype_and_shape():
    with pytest.raises(tj.DtypeError, match="f32.*f64|carry keeps") as err:
        tj.grad(lambda x: tj.fori_loop(0, 3, lambda i, c: c * 2.0 * np.ones((), np.float64),
                                       x.astype(np.float32)).astype(float))(1.0)
    assert "test_control.py" in str(err.value)
    with pytest.raises(tj.ShapeError, match="carry keeps"):
        tj.grad(lambda x: np.sum(tj.fori_loop(0, 3, lambda i, c: c * np.ones(2), x)))(1.0)


def test_python_if_on_a_per_step_value_names_the_line_and_the_fix():
    def relu(x):
        if x > 0:
            return x
        return 0.0

    with pytest.raises(tj.ConcretizationError) as err:
        tj.grad(lambda x: tj.fori_loop(0, 2, lambda i, c: relu(c), x))(1.0)
    text = str(err.value)
    assert "test_control.py" in text and "tj.cond" in text and "tj.where" in text


# ---- the numba backend: real loops, one compile --------------------------------------------------
def everything(p, xs, n):
    """Every construct in one program (one compile for the suite)."""
    total = lv_loop(p) + lv_loop(p, 25, 4) + lv_loop(p, 30, "binomial")
    total = total + rnn(p[:3], xs, True) + fixed_point(p[0])
    total = total + piecewise(p[:2]) + np.sum(tj.checkpoint(np.sin)(p))
    total = total + tj.fori_loop(0, n, lambda i, c: c * p[3] + 0.1, 1.0)
    return total


@pytest.fixture(scope="module")
def compiled():
    return tj.value_and_grad(everything, argnums=(0, 1), backend="numba")


def test_numba_matches_the_interpreter(compiled):
    with_numba = compiled(P, XS, 12)
    interpreted = tj.value_and_grad(everything, argnums=(0, 1), backend="interpret")(P, XS, 12)
    np.testing.assert_allclose(with_numba[0], interpreted[0], rtol=1e-12)
    for a, b in zip(with_numba[1], interpreted[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    assert compiled.cache_info()["compiles"] + compiled.cache_info()["disk_loads"] == 1


def test_numba_compiles_once_for_any_number_of_steps(compiled):
    compiled(P, XS, 12)
    before = dict(compiled.cache_info())
    value, _ = compiled(P, XS, 100_000)
    info = compiled.cache_info()
    assert (info["traces"], info["compiles"], info["disk_loads"]) == (
        before["traces"], before["compiles"], before["disk_loads"])
    expected = tj.value_and_grad(everything, backend="interpret")(P, XS, 100_000)[0]
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_numba_static_step_counts_share_one_program():
    sources = {tj.explain(lambda p: lv_loop(p, n))(P).source for n in (10, 100_000)}
    assert len(sources) == 1                # the trip count is a slot of the size table


def test_a_python_float_feeding_a_loop_of_an_inlined_program():
    """A compiled program called inside another transform with a Python float: the float is
    its input's f64, not the integer type of the loop's trip count it is bound next to."""
    def loss(w, lr):
        return np.sum(tj.fori_loop(0, 3, lambda i, v: v - lr * v, w))

    outer = tj.grad(lambda w: tj.jit(loss)(w, 0.1))
    for w in (np.ones(3), np.arange(3.0)):
        np.testing.assert_allclose(outer(w), np.full(3, 0.9 ** 3), rtol=1e-14)
