"""Re-rolling plain Python loops (control/reroll.py): the re-rolled program equals the unrolled
one (TAPEJIT_REROLL=0, or the traced tape before the pass) on values and gradients, first and
second order, compiled and interpreted; what does not fit a loop stays unrolled; the re-rolled
tape does not grow with the step count and tracing + re-rolling stays linear in it.

Compiles are few (one per program below); the unrolled references run on the interpreter.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tracemalloc

import numpy as np
import pytest

import tapejit as tj
from tapejit import autodiff, config
from tapejit.control import primitives as C, repeats
from tapejit.control.reroll import reroll
from tapejit.interpret import interpret
from tapejit.passes import PIPELINE
from tapejit.pytree import flatten, unflatten
from tapejit.tools import selfcheck
from tapejit.tools.selfcheck import generate
from tapejit.typecheck import typecheck

from scipy.special import logsumexp   # (after tapejit: its traced version, api.md)  # noqa: E402

BACKENDS = ["interpret", "numba"]


@contextlib.contextmanager
def rerolling(on: bool):
    """TAPEJIT_REROLL set to `on` within (transforms made within build with it)."""
    saved = os.environ.get("TAPEJIT_REROLL")
    os.environ["TAPEJIT_REROLL"] = "1" if on else "0"
    config.reload()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TAPEJIT_REROLL")
        else:
            os.environ["TAPEJIT_REROLL"] = saved
        config.reload()


def unrolled_value_and_grad(f, *args, argnums=0):
    """The reference: `tj.value_and_grad` with re-rolling off, on the interpreter."""
    with rerolling(False):
        return tj.value_and_grad(f, argnums=argnums, backend="interpret")(*args)


def assert_trees_close(got, want, rtol=1e-11, atol=1e-13):
    got_leaves, got_td = flatten(got)
    want_leaves, want_td = flatten(want)
    assert got_td == want_td
    for a, b in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def scans(tape):
    return [e for e in tape.eqns if e.op == C.scan.name]


def loops_of(f, *args):
    """(steps, carries) of each loop `reroll` makes of f's traced tape (checked valid)."""
    tape, loops = reroll(tj.make_tape(f)(*args))
    typecheck(tape)
    return [(loop.steps, loop.n_carry) for loop in loops]


# ---- Lotka-Volterra: explicit Euler on scalars ---------------------------------------------------
P = np.array([1.1, 0.4, 0.1, 0.4])
DT = 0.01


def lotka_volterra(p, steps=1000):
    x, y = 1.0, 2.0
    for _ in range(steps):
        x, y = x + DT * (p[0] * x - p[1] * x * y), y + DT * (p[2] * x * y - p[3] * y)
    return (x - 1.5) ** 2 + y


def lv_fori(p, steps=1000):
    def step(i, c):
        x, y = c
        return x + DT * (p[0] * x - p[1] * x * y), y + DT * (p[2] * x * y - p[3] * y)
    x, y = tj.fori_loop(0, steps, step, (1.0, 2.0))
    return (x - 1.5) ** 2 + y


@pytest.fixture(scope="module")
def lv_unrolled():
    """1,000 steps without re-rolling: the traced tape's VJP, interpreted (no passes)."""
    tape = tj.make_tape(lotka_volterra)(P)
    joint = autodiff.vjp_tape(tape, [0], [autodiff.ONE])
    return interpret(joint, [P])


@pytest.mark.parametrize("backend", BACKENDS)
def test_lotka_volterra_1000_steps_rerolls_to_one_scan(backend, lv_unrolled):
    vg = tj.value_and_grad(lotka_volterra, backend=backend)
    value, grad = vg(P)
    assert_trees_close((value, grad), tuple(lv_unrolled), rtol=1e-10)
    assert_trees_close((value, grad), tj.value_and_grad(lv_fori, backend=backend)(P))
    assert_trees_close(vg(P), tuple(lv_unrolled), rtol=1e-10)     # a later call: the cache hit
    assert vg.cache_info()["rerolled"] == 1
    assert loops_of(lotka_volterra, P) == [(1000, 2)]


def test_second_order_through_a_rerolled_loop():
    weights = np.arange(1.0, 5.0)

    def inner(p):
        return np.sum(tj.grad(lambda q: lotka_volterra(q, 30))(p) * weights)

    want = unrolled_value_and_grad(inner, P)
    for backend in BACKENDS:
        assert_trees_close(tj.value_and_grad(inner, backend=backend)(P), want, rtol=1e-9)
    hessian = tj.hessian(lambda p: lotka_volterra(p, 30), backend="interpret")(P)
    with rerolling(False):
        want = tj.hessian(lambda p: lotka_volterra(p, 30), backend="interpret")(P)
    np.testing.assert_allclose(hessian, want, rtol=1e-9, atol=1e-12)


def lv_final_state(p, steps=200):
    x, y = p[0], 2.0 * p[3]
    for _ in range(steps):
        x, y = x + 0.01 * (p[0] * x - p[1] * x * y), y + 0.01 * (p[2] * x * y - p[3] * y)
    return np.stack([x, y])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transform, n_scans", [
    (lambda f, backend: tj.jacobian(f, backend=backend), 1),
    # the hessian's inner grad, inlined, re-rolled already: a scan each way
    (lambda f, backend: tj.hessian(lambda p: np.sum(f(p) ** 2), backend=backend), 2),
    (lambda f, backend: (lambda p: tj.jvp(f, (p,), (np.arange(4.0),), backend=backend)), 1),
], ids=["jacobian", "hessian", "jvp"])
def test_jacobian_hessian_and_jvp_reroll(transform, n_scans, backend, monkeypatch):
    from tapejit.transforms import traced
    made, reroll_tape = [], traced.rerolled
    monkeypatch.setattr(traced, "remembered", lambda stage, key, make: make())  # not on disk
    monkeypatch.setattr(traced, "rerolled", lambda tape, stages=None:
                        made.append(reroll_tape(tape, stages)) or made[-1])
    f = transform(lv_final_state, backend)
    got = f(P)
    tape = made[-1]              # the outer transform's (hessian's inner jacrev came first)
    assert len(scans(tape)) == n_scans
    assert len(tape.eqns) < 40                                   # not 200 steps' worth
    assert_trees_close(f(P), got)                                # a later call
    with rerolling(False):
        want = transform(lv_final_state, "interpret")(P)
    assert_trees_close(got, want, rtol=1e-9, atol=1e-12)


# ---- velocity Verlet N-body, gradient w.r.t. the initial velocities ------------------------------
def accelerations(x):
    d = x[None, :, :] - x[:, None, :]
    r2 = np.sum(d * d, axis=-1) + 0.01         # softened
    return np.sum(d * (r2 ** -1.5)[:, :, None], axis=1)


def nbody(v, x, steps=20, dt=0.01):
    a = accelerations(x)
    for _ in range(steps):
        v = v + 0.5 * dt * a
        x = x + dt * v
        a = accelerations(x)
        v = v + 0.5 * dt * a
    return np.sum(v * v) + np.sum(x[:, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_vjp_of_an_unrolled_loop_rerolls(backend, lv_unrolled, monkeypatch):
    from tapejit.transforms import traced
    made, reroll_tape = [], traced.rerolled
    monkeypatch.setattr(traced, "remembered", lambda stage, key, make: make())  # not on disk
    monkeypatch.setattr(traced, "rerolled", lambda tape, stages=None:
                        made.append(reroll_tape(tape, stages)) or made[-1])
    value, vjp_fn = tj.vjp(lotka_volterra, P, backend=backend)
    assert [len(scans(t)) for t in made] == [1]
    assert_trees_close((value, vjp_fn(1.0)[0]), tuple(lv_unrolled), rtol=1e-10)
    assert_trees_close(vjp_fn(1.0)[0], lv_unrolled[1], rtol=1e-10)     # a later call
    with rerolling(False):
        # a new function: tj.vjp keeps the programs of lotka_volterra, re-rolled
        unrolled_value, unrolled_fn = tj.vjp(lambda p: lotka_volterra(p), P, backend="interpret")
    assert_trees_close(vjp_fn(2.0)[0], unrolled_fn(2.0)[0], rtol=1e-10)


def test_nbody_velocity_verlet_gradient():
    rng = np.random.default_rng(0)
    x, v = rng.normal(size=(8, 3)), 0.1 * rng.normal(size=(8, 3))
    want = unrolled_value_and_grad(nbody, v, x)
    compiled = tj.value_and_grad(nbody, backend="numba")
    assert_trees_close(compiled(v, x), want)
    assert_trees_close(compiled(v, x), want)          # a later call: the cache hit
    assert compiled.cache_info()["hits"] == 1
    assert_trees_close(tj.value_and_grad(nbody, backend="interpret")(v, x), want)
    assert compiled.cache_info()["rerolled"] == 1
    assert loops_of(nbody, v, x) == [(20, 3)]


# ---- an MLP trained over a few optimizer steps inside one tj.jit ---------------------------------
def mlp_loss(params, x, y):
    for w, b in params[:-1]:
        x = np.tanh(x @ w + b)
    w, b = params[-1]
    return np.mean((x @ w + b - y) ** 2)


def train(params, x, y, lr):
    for _ in range(6):
        grads = tj.grad(mlp_loss)(params, x, y)
        params = [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)]
    return params, mlp_loss(params, x, y)


def test_mlp_training_steps_inside_one_jit():
    rng = np.random.default_rng(1)
    sizes = [3, 8, 8, 1]
    params = [(rng.normal(size=(m, n)) / np.sqrt(m), np.zeros(n))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(16, 3))
    y = np.sin(x[:, :1])
    with rerolling(False):
        want = tj.jit(train, backend="interpret")(params, x, y, 0.1)
    compiled = tj.jit(train, backend="numba")
    assert_trees_close(compiled(params, x, y, 0.1), want)
    assert compiled.cache_info()["rerolled"] == 1
    assert want[1] < mlp_loss(params, x, y)            # it trained


# ---- what re-rolls, what stays unrolled ----------------------------------------------------------
def step(x):
    return np.tanh(x) * 0.9 + x * 0.1 - 0.3 * x * x


def chain(x, steps):
    for _ in range(steps):
        x = x * 0.99 + np.sin(x) * 0.01
    return np.sum(x)


def ends_differ(x):
    for i in range(10):
        x = np.tanh(x) * 0.9
        if i == 0:
            x = np.sin(x) * 2.0
        x = x + 0.1 * x * x - 0.3
        if i == 9:
            x = np.cos(x) * 3.0
    return np.sum(x)


def two_loops(x):
    y = x * 0.5
    for _ in range(6):
        x = step(x) + y
    s = np.sum(x)
    for _ in range(7):
        y = np.cos(y) * s + y * 0.5 - y * y * 0.1
    return np.sum(y) + s


def nested(x):
    for i in range(5):
        for _ in range(4):
            x = step(x * 0.9)
        x = x - 0.1 * np.sum(x) + i
    return np.sum(x)


def two_steps_back(x):
    values = [x, np.sin(x)]
    for _ in range(8):
        values.append(step(values[-1]) + values[-2] * 0.1 - values[-1] * values[-2])
    return np.sum(values[-1])


def trajectory(x):
    states, losses = [], []
    for _ in range(8):
        losses.append(np.sum(x * x))
        x = step(x) - 0.1 * losses[-1]
        states.append(x)
    return np.sum(np.stack(states) ** 2) + losses[3] + losses[-1]


def python_time(x):
    t = 0.0
    for _ in range(10):
        x = x + 0.1 * np.sin(x) * np.cos(t) - 0.01 * x * x + 0.3 * t
        t += 0.1
    return np.sum(x)


def fancy_index(x):
    for _ in range(6):
        x = step(x[np.array([1, 0, 2, 4, 3])])       # a new constant array each step
    return np.sum(x)


ROWS = np.linspace(0.0, 1.0, 40).reshape(8, 5)      # numpy data: each row a constant


def walk_rows(x):
    data = np.outer(np.arange(1.0, 9.0), x)         # traced rows, walked backwards
    for row, const in zip(data[::-1], ROWS):
        x = step(x) * 0.5 + row * const
    return np.sum(x)


def joined(x):
    outs = []
    for _ in range(8):
        x = step(x)
        outs.append(x)
    return np.sum(np.concatenate(outs[::-1]) ** 2) + np.sum(np.stack(outs, axis=1)[1] ** 3)


def moving_slice_of_carry(x):
    for i in range(5):
        x = step(x) + np.sin(x[i]) * x          # element i of the state each step: a new slice
    return np.sum(x)


def inner_transform(x):
    return np.sum(tj.grad(lambda y: chain(y * x, 10))(x))    # a loop in an inlined gradient


CASES = {   # f -> (steps, carries) of each loop, outer loops before inner ones
    ends_differ: [(9, 1)],
    two_loops: [(6, 1), (7, 1)],
    nested: [(5, 1), (4, 1)],
    two_steps_back: [],
    trajectory: [(8, 1)],
    python_time: [(10, 1)],
    fancy_index: [(6, 1)],
    walk_rows: [(8, 1)],
    joined: [(8, 1)],
    moving_slice_of_carry: [],
    inner_transform: [],        # (its gradient's own tape re-rolled, see below)
}
X = np.linspace(-0.5, 0.7, 5)


@pytest.mark.parametrize("f", list(CASES), ids=lambda f: f.__name__)
def test_loops_rerolled_or_left_unrolled(f):
    assert loops_of(f, X) == CASES[f]
    got = tj.value_and_grad(f, backend="interpret")(X)
    assert_trees_close(got, unrolled_value_and_grad(f, X))


def test_a_loop_in_an_inlined_transform_rerolls():
    vg = tj.value_and_grad(inner_transform, backend="interpret")
    vg(X)
    assert vg.cache_info()["rerolled"] == 1


def test_the_step_count_is_whatever_was_traced():
    f = tj.jit(chain, static_argnums=1, backend="interpret")
    for steps in (12, 30):
        with rerolling(False):
            want = tj.jit(chain, static_argnums=1, backend="interpret")(X, steps)
        np.testing.assert_allclose(f(X, steps), want, rtol=1e-13)
    assert f.cache_info()["rerolled"] == 2


def test_a_stack_of_every_step_too_small_to_pay_stays_unrolled():
    def short(x):
        states = []
        for _ in range(4):
            x = np.sin(x) * 0.5
            states.append(x)
        return np.sum(np.stack(states))
    assert loops_of(short, X) == []


def test_what_each_case_becomes():
    nested_tape = reroll(tj.make_tape(nested)(X))[0]
    [outer] = scans(nested_tape)
    assert len(scans(outer.kw["body"])) == 1 and len(nested_tape.eqns) == 2
    assert outer.kw["n_xs"] == 1                          # `+ i`: the step's literal
    [scan] = scans(reroll(tj.make_tape(trajectory)(X))[0])
    assert len(scan.outs) == 3                            # the carry, the states, the losses
    [scan] = scans(reroll(tj.make_tape(python_time)(X))[0])
    assert scan.kw["n_xs"] == 2                           # cos(t) and 0.3 * t per step
    unrolled = tj.make_tape(two_steps_back)(X)
    assert reroll(unrolled)[0] is unrolled


def test_nested_ys_and_xs_compiled():
    def together(x):
        return nested(x) + trajectory(x) + python_time(x) + two_steps_back(x)

    compiled = tj.value_and_grad(together, backend="numba")
    assert_trees_close(compiled(X), unrolled_value_and_grad(together, X))
    assert compiled.cache_info()["rerolled"] == 4


# ---- random step bodies: unrolled vs tj.fori_loop ------------------------------------------------
def random_loop(seed, steps=5):
    """A random program (tools/program_generator.py) as the step of a loop carrying its first
    float argument: (unrolled, fori_loop version, arguments, float argument positions).
    Without a guarded statement: a fori_loop body cannot branch on a per-step value."""
    saved, selfcheck.GUARDED = selfcheck.GUARDED, 0.0
    try:
        program = generate(seed)
    finally:
        selfcheck.GUARDED = saved
    f = program.function("reroll")
    at = program.float_positions[0]

    def step(c, args):
        args = list(args)
        args[at] = c
        return 0.5 * c + 0.25 * np.tanh(np.sum(f(*args)) + c)

    def unrolled(*args):
        c = args[at]
        for _ in range(steps):
            c = step(c, args)
        return np.sum(c)

    def looped(*args):
        return np.sum(tj.fori_loop(0, steps, lambda i, c: step(c, args), args[at]))

    rng = np.random.default_rng(seed)
    args = program.arguments(program.draw_sizes(rng), rng)
    return unrolled, looped, args, program.float_positions


@pytest.mark.parametrize("seed", range(30))
def test_random_step_bodies_unrolled_equal_fori_loop(seed):
    unrolled, looped, args, floats = random_loop(seed)
    vg = tj.value_and_grad(unrolled, argnums=floats, backend="interpret")
    got = vg(*args)
    assert vg.cache_info()["rerolled"] == 1
    assert_trees_close(got, tj.value_and_grad(looped, argnums=floats, backend="interpret")(*args))


def test_random_step_bodies_compiled():
    loops = [random_loop(seed) for seed in (3, 11)]

    def both(*args):
        return loops[0][0](*args[:len(loops[0][2])]) + loops[1][0](*args[len(loops[0][2]):])

    args = loops[0][2] + loops[1][2]
    floats = loops[0][3] + tuple(len(loops[0][2]) + i for i in loops[1][3])
    compiled = tj.value_and_grad(both, argnums=floats, backend="numba")
    assert_trees_close(compiled(*args), unrolled_value_and_grad(both, *args, argnums=floats))
    assert compiled.cache_info()["rerolled"] == 2


# ---- size and work -------------------------------------------------------------------------------
def test_rerolled_tape_does_not_grow_with_steps():
    sizes = {n: len(reroll(tj.make_tape(lambda p: lotka_volterra(p, n))(P))[0].eqns)
             for n in (10, 100, 1000)}
    assert sizes[10] == sizes[100] == sizes[1000] < 20      # fewer eqns than one step


def test_tracing_and_rerolling_is_linear_in_steps():
    def calls(steps):
        """The function calls (Python's and builtins') that tracing and re-rolling make: the
        work counted, whatever the machine's speed."""
        made = 0

        def count(frame, event, arg):
            nonlocal made
            made += event in ("call", "c_call")
        sys.setprofile(count)
        try:
            tape, loops = reroll(tj.make_tape(lambda x: chain(x, steps))(X))
        finally:
            sys.setprofile(None)
        assert [loop.steps for loop in loops] == [steps] and len(tape.eqns) < 5
        return made

    calls(100)                      # (first-use work: imports, lazily built tables)
    # 10x the steps: linear work makes ~10x the calls, quadratic 100x
    assert calls(10_000) < 12 * calls(1_000)


def large_consts_per_step(x, flip=True):
    """Each step makes a constant over SMALL_CONST bytes: equal ones (2.0), then ones that
    differ (i), then zeros whose sign differs (arctan2 tells them apart: +-pi)."""
    n = x.size * 120
    for _ in range(4):
        x = step(x) + 0.1 * np.mean(np.full(n, 2.0)) * x
    for i in range(4):
        x = step(x) + 0.1 * np.mean(np.full(n, float(i))) * x
    for i in range(4):
        signs = np.full(n, -0.0 if flip and i % 2 else 0.0)
        x = step(x) + 0.1 * np.mean(np.arctan2(signs, -1.0 - np.sum(x * x))) * x
    return np.sum(x)


def test_large_constants_per_step_equal_unrolled():
    assert 600 * 8 > repeats.SMALL_CONST
    value = large_consts_per_step(X)
    assert np.isfinite(value) and value != large_consts_per_step(X, flip=False)
    want = unrolled_value_and_grad(large_consts_per_step, X)
    got = tj.value_and_grad(large_consts_per_step, backend="interpret")(X)
    assert_trees_close(got, want)
    np.testing.assert_allclose(got[0], value, rtol=1e-12)
    compiled = tj.value_and_grad(large_consts_per_step, backend="numba")
    for _ in range(2):                                  # first and later calls
        assert_trees_close(compiled(X), want)
    assert compiled.cache_info()["rerolled"] == 3                 # its three loops


def test_a_data_array_is_not_copied_to_find_steps():
    """Minibatches of 32 MB of data at a traced step number (the data a constant of the
    tape, captured as a view at each step): the first call, traced, re-rolled and run, never
    copies the data (the re-roll's index finds the views equal by where their elements
    are)."""
    data = np.random.default_rng(0).standard_normal((4096, 1024))

    def walk(x, i):
        for _ in range(6):
            x = step(x) + np.sum(data[i * 2:(i + 1) * 2, :5], axis=0) * x
        return np.sum(x)
    vg = tj.value_and_grad(walk, backend="interpret")
    tracemalloc.start()
    try:
        got = vg(X, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert vg.cache_info()["rerolled"] == 1
    assert peak < data.nbytes // 8
    want = unrolled_value_and_grad(walk, X, 3)
    assert_trees_close(got, want)
    compiled = tj.value_and_grad(walk, backend="numba")
    for _ in range(2):                                  # first and later calls
        assert_trees_close(compiled(X, 3), want)


# ---- settings and reports ------------------------------------------------------------------------
def test_reroll_off_keeps_the_loop_unrolled():
    with rerolling(False):
        vg = tj.value_and_grad(lambda p: lotka_volterra(p, 30), backend="interpret")
        vg(P)
        ex = tj.explain(lambda p: lotka_volterra(p, 30))(P)
    assert vg.cache_info()["rerolled"] == 0 and "rerolled" not in ex.tapes
    assert not scans(ex.tapes["autodiff"])


def test_explain_shows_what_was_rerolled():
    ex = tj.explain(lambda p: lotka_volterra(p, 30))(P)
    assert list(ex.tapes) == ["traced", "rerolled", "autodiff", *(n for n, _, _ in PIPELINE),
                              "fuse"]
    assert len(scans(ex.tapes["rerolled"])) == 1
    line = lotka_volterra.__code__.co_firstlineno + 3
    note = (f"re-rolled into a scan: the Python loop at test_reroll.py:{line}: 30 steps of 20 "
            f"eqns, 2 carries")
    assert note in ex.text.splitlines()
    assert "== rerolled: repeated steps of plain Python loops" in ex.text


# ---- sequence models, written as HIPS autograd's examples write them -----------------------------
# Python loops over the time steps of a data array (its rows, as constants or traced), carrying
# one or two hidden states, collecting per-step outputs in a list read after the loop.
def sigmoid(z):
    return 0.5 * (np.tanh(z) + 1.0)


def affine(weights, *parts):
    """[parts..., 1] @ weights: the parts side by side, with a column of ones for the bias."""
    return np.dot(np.hstack(parts + (np.ones((parts[0].shape[0], 1)),)), weights)


def log_softmax(z):
    return z - logsumexp(z, axis=1, keepdims=True)


def rnn_log_probs(params, seqs):
    hidden = np.repeat(params["h0"], seqs.shape[1], axis=0)
    out = [log_softmax(affine(params["readout"], hidden))]
    for x in seqs:                                    # a Python loop over the time steps
        hidden = np.tanh(affine(params["cell"], x, hidden))
        out.append(log_softmax(affine(params["readout"], hidden)))
    return out


def lstm_log_probs(params, seqs):
    hidden = np.repeat(params["h0"], seqs.shape[1], axis=0)
    cells = np.repeat(params["c0"], seqs.shape[1], axis=0)
    out = [log_softmax(affine(params["readout"], hidden))]
    for x in seqs:
        change = np.tanh(affine(params["change"], x, hidden))
        forget = sigmoid(affine(params["forget"], x, hidden))
        ingate = sigmoid(affine(params["ingate"], x, hidden))
        outgate = sigmoid(affine(params["outgate"], x, hidden))
        cells = cells * forget + ingate * change
        hidden = outgate * np.tanh(cells)
        out.append(log_softmax(affine(params["readout"], hidden)))
    return out


def rnn_loss(params, seqs):
    """Next-symbol log likelihood: the outputs read back one step at a time."""
    log_probs = rnn_log_probs(params, seqs)
    total = 0.0
    for t in range(seqs.shape[0]):
        total += np.sum(log_probs[t] * seqs[t])
    return -total / seqs.size


def lstm_loss(params, seqs):
    """The same, the outputs joined after the loop."""
    return -np.sum(np.concatenate(lstm_log_probs(params, seqs)[:-1]) * seqs.reshape(
        -1, seqs.shape[2])) / seqs.size


def hmm_log_likelihood(log_params, symbols):
    """The forward pass of a hidden Markov model: a logsumexp recursion over the symbols."""
    log_pi, log_a, log_b = log_params
    log_alpha = log_pi
    for y in symbols:
        log_alpha = logsumexp(log_alpha[:, None] + log_a, axis=0) + log_b[:, y]
    return logsumexp(log_alpha)


def sequence_problem(name, steps, seed=0):
    """(loss, params, data) of one model over `steps` time steps, small sizes."""
    rng = np.random.default_rng(seed)
    n_in, n_state, batch = 5, 4, 3

    def weights(*shape):
        return 0.5 * rng.normal(size=shape)

    seqs = np.eye(n_in)[rng.integers(0, n_in, size=(steps, batch))]
    if name == "rnn":
        params = {"h0": weights(1, n_state), "cell": weights(n_in + n_state + 1, n_state),
                  "readout": weights(n_state + 1, n_in)}
        return rnn_loss, params, seqs
    if name == "lstm":
        params = {"h0": weights(1, n_state), "c0": weights(1, n_state),
                  "readout": weights(n_state + 1, n_in),
                  **{gate: weights(n_in + n_state + 1, n_state)
                     for gate in ("change", "forget", "ingate", "outgate")}}
        return lstm_loss, params, seqs
    log_params = [np.log(rng.dirichlet(np.ones(4))), np.log(rng.dirichlet(np.ones(4), 4)),
                  np.log(rng.dirichlet(np.ones(6), 4))]
    return hmm_log_likelihood, log_params, rng.integers(0, 6, size=steps)


def central_differences(f, params, grad, seed=0, eps=1e-6):
    """(f(p + eps d) - f(p - eps d)) / 2 eps and <grad, d> along a random direction d, f run
    by numpy itself."""
    leaves, td = flatten(params)
    rng = np.random.default_rng(seed)
    d = [rng.normal(size=np.shape(leaf)) for leaf in leaves]
    moved = [unflatten(td, [leaf + sign * eps * v for leaf, v in zip(leaves, d)])
             for sign in (1, -1)]
    slope = sum(np.sum(g * v) for g, v in zip(flatten(grad)[0], d))
    return (f(moved[0]) - f(moved[1])) / (2 * eps), slope


# (model, data given as, scans): the data an argument (traced) or a numpy array the loss
# closes over (its rows constants); each re-rolls into scans whose number of ops does not
# depend on the length
SEQUENCE_CASES = [("rnn", "argument", 2), ("rnn", "closure", 2), ("lstm", "argument", 1),
                  ("lstm", "closure", 1), ("hmm", "argument", 1), ("hmm", "closure", 1)]
# the steps left outside the scan: the RNN's and LSTM's last output, whose step is cut short
# (the state it would pass on is not read, so not traced)
OUTSIDE = {"rnn": 1, "lstm": 1, "hmm": 0}


def sequence_loss(name, data_as, steps):
    loss, params, data = sequence_problem(name, steps)
    if data_as == "argument":
        return loss, params, (data,)
    return (lambda p: loss(p, data)), params, ()


@pytest.mark.parametrize("name, data_as, n_loops", SEQUENCE_CASES,
                         ids=[f"{n}-{d}" for n, d, _ in SEQUENCE_CASES])
def test_sequence_models_reroll_to_scans_of_fixed_size(name, data_as, n_loops):
    sizes = []
    for steps in (20, 40):
        f, params, data = sequence_loss(name, data_as, steps)
        ex = tj.explain(f)(params, *data)
        assert len(scans(ex.tapes["rerolled"])) == n_loops
        assert sum("re-rolled into a scan" in note for note in ex.notes) == n_loops
        assert [n for n, _ in loops_of(f, params, *data)] == [steps - OUTSIDE[name]] * n_loops
        sizes.append((len(ex.tapes["rerolled"].eqns), len(ex.tape.eqns)))
    assert sizes[0] == sizes[1]                   # twice the steps, the same ops


@pytest.mark.parametrize("name, data_as", [case[:2] for case in SEQUENCE_CASES],
                         ids=[f"{n}-{d}" for n, d, _ in SEQUENCE_CASES])
def test_sequence_models_equal_unrolled_and_central_differences(name, data_as):
    f, params, data = sequence_loss(name, data_as, 30)
    compiled = tj.value_and_grad(f, backend="numba")
    value, grad = compiled(params, *data)
    want = unrolled_value_and_grad(f, params, *data)
    assert_trees_close((value, grad), want, rtol=1e-10, atol=1e-12)
    assert_trees_close(compiled(params, *data), want, rtol=1e-10, atol=1e-12)   # a later call
    assert compiled.cache_info()["rerolled"] >= 1 and compiled.cache_info()["traces"] == 1
    numeric, slope = central_differences(lambda p: f(p, *data), params, grad)
    np.testing.assert_allclose(numeric, slope, rtol=1e-6)
