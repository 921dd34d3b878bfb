"""Re-rolling plain Python loops (control/reroll.py): the re-rolled program equals the unrolled
one (TAPEJIT_REROLL=0, or the traced tape before the pass) on values and gradients, first and
second order, compiled and interpreted; what does not fit a loop stays unrolled; the re-rolled
tape does not grow with the step count and tracing + re-rolling stays linear in it.

Compiles are few (one per program below); the unrolled references run on the interpreter.
"""
from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import pytest

import tapejit as tj
from tapejit import autodiff, config
from tapejit.control import primitives as C
from tapejit.control.reroll import reroll
from tapejit.interpret import interpret
from tapejit.passes import PIPELINE
from tapejit.pytree import flatten
from tapejit.selfcheck import generate
from tapejit.typecheck import typecheck

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
    from tapejit import transforms
    made, reroll_tape = [], transforms.rerolled
    monkeypatch.setattr(transforms, "rerolled",
                        lambda tape: made.append(reroll_tape(tape)) or made[-1])
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
    from tapejit import transforms
    made, reroll_tape = [], transforms.rerolled
    monkeypatch.setattr(transforms, "rerolled",
                        lambda tape: made.append(reroll_tape(tape)) or made[-1])
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
    """A random program (randprog.py) as the step of a loop carrying its first float argument:
    (unrolled, fori_loop version, arguments, float argument positions)."""
    program = generate(seed)
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


# ---- size and time -------------------------------------------------------------------------------
def test_rerolled_tape_does_not_grow_with_steps():
    sizes = {n: len(reroll(tj.make_tape(lambda p: lotka_volterra(p, n))(P))[0].eqns)
             for n in (10, 100, 1000)}
    assert sizes[10] == sizes[100] == sizes[1000] < 20      # fewer eqns than one step


def test_tracing_and_rerolling_is_linear_in_steps():
    def seconds(steps):
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            tape, loops = reroll(tj.make_tape(lambda x: chain(x, steps))(X))
            best = min(best, time.perf_counter() - start)
        assert [loop.steps for loop in loops] == [steps] and len(tape.eqns) < 5
        return best

    # 10x the steps: linear work takes ~10x, quadratic 100x (the margin is for shared machines)
    assert seconds(10_000) < 35 * seconds(1_000)


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
    assert list(ex.tapes) == ["traced", "rerolled", "autodiff", *(n for n, _, _ in PIPELINE)]
    assert len(scans(ex.tapes["rerolled"])) == 1
    line = lotka_volterra.__code__.co_firstlineno + 3
    note = (f"re-rolled into a scan: the Python loop at test_reroll.py:{line}: 30 steps of 20 "
            f"eqns, 2 carries")
    assert note in ex.text.splitlines()
    assert "== rerolled: repeated steps of plain Python loops" in ex.text
