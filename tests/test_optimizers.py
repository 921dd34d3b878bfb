"""Optimizers: each against a hand-written update on a quadratic; schedules, clipping, dtypes,
Variables; a tj.jit training step traced once, with its schedule as run-time values, and on
numba compiled once and run as one native call per step."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit import optimizers as optim

A = np.array([1.0, 4.0, 0.5])
B = np.array([1.0, -2.0, 0.3])


def quad(p):
    return 0.5 * np.sum(A * p["x"] ** 2) - np.sum(B * p["x"]) + np.sum(p["y"] ** 2)


def quad_grad(p):
    return {"x": A * p["x"] - B, "y": 2.0 * p["y"]}


def start():
    return {"x": np.array([0.5, -1.0, 2.0]), "y": np.array([[1.0, -0.5]])}


def run_opt(opt, steps=5):
    params, state = start(), None
    state = opt.init(params)
    for _ in range(steps):
        params, state = opt.update(quad_grad(params), state, params)
    return params, state


def run_ref(update, slots, steps=5):
    """A hand-written optimizer loop: update(p, g, slots, t) -> (p, slots), leaf by leaf."""
    params = start()
    state = {k: [np.zeros_like(v) for _ in range(slots)] for k, v in params.items()}
    for t in range(1, steps + 1):
        grads = quad_grad(params)
        for k in params:
            params[k], state[k] = update(params[k], grads[k], state[k], t)
    return params


def sgd_ref(lr, mu=0.0, nesterov=False, wd=0.0):
    def update(p, g, s, t):
        g = g + wd * p
        if not mu:
            return p - lr * g, s
        v = mu * s[0] + g
        return p - lr * (g + mu * v if nesterov else v), [v]
    return update


def adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
    def update(p, g, s, t):
        if not decoupled:
            g = g + wd * p
        m = b1 * s[0] + (1 - b1) * g
        v = b2 * s[1] + (1 - b2) * g * g
        new = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        return (new - lr * wd * p if decoupled else new), [m, v]
    return update


def rmsprop_ref(lr, alpha=0.99, eps=1e-8):
    def update(p, g, s, t):
        sq = alpha * s[0] + (1 - alpha) * g * g
        return p - lr * g / (np.sqrt(sq) + eps), [sq]
    return update


def adagrad_ref(lr, eps=1e-10):
    def update(p, g, s, t):
        sq = s[0] + g * g
        return p - lr * g / (np.sqrt(sq) + eps), [sq]
    return update


CASES = [
    (lambda: optim.SGD(0.1), sgd_ref(0.1), 0),
    (lambda: optim.SGD(0.1, momentum=0.9), sgd_ref(0.1, 0.9), 1),
    (lambda: optim.SGD(0.1, momentum=0.9, nesterov=True), sgd_ref(0.1, 0.9, True), 1),
    (lambda: optim.SGD(0.1, momentum=0.5, weight_decay=0.01), sgd_ref(0.1, 0.5, wd=0.01), 1),
    (lambda: optim.Adam(0.05), adam_ref(0.05), 2),
    (lambda: optim.Adam(0.05, weight_decay=0.1), adam_ref(0.05, wd=0.1), 2),
    (lambda: optim.AdamW(0.05, weight_decay=0.1), adam_ref(0.05, wd=0.1, decoupled=True), 2),
    (lambda: optim.RMSprop(0.01), rmsprop_ref(0.01), 1),
    (lambda: optim.Adagrad(0.1), adagrad_ref(0.1), 1),
]


@pytest.mark.parametrize("make, ref, slots", CASES,
                         ids=["sgd", "momentum", "nesterov", "sgd-wd", "adam", "adam-l2",
                              "adamw", "rmsprop", "adagrad"])
def test_matches_hand_written_update(make, ref, slots) -> None:
    params, state = run_opt(make())
    want = run_ref(ref, slots)
    for k in want:
        np.testing.assert_allclose(params[k], want[k], rtol=1e-12, atol=1e-15)
    assert state["step"] == 5.0


def test_optimizers_decrease_the_loss() -> None:
    for make, _, _ in CASES:
        params, _ = run_opt(make(), steps=50)
        assert quad(params) < quad(start())


def test_schedules() -> None:
    assert optim.constant(0.3)(7) == 0.3
    sd = optim.step_decay(1.0, every=10, factor=0.5)
    assert [sd(np.float64(s)) for s in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]
    cd = optim.cosine_decay(1.0, steps=100, final=0.1)
    assert cd(np.float64(0)) == pytest.approx(1.0)
    assert cd(np.float64(50)) == pytest.approx(0.55)
    assert cd(np.float64(100)) == pytest.approx(0.1) and cd(np.float64(500)) == pytest.approx(0.1)
    wu = optim.warmup(cd, steps=4)
    assert [wu(np.float64(s)) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert wu(np.float64(54)) == pytest.approx(0.55)
    assert optim.warmup(2.0, 2)(np.float64(0)) == 1.0


def test_schedule_drives_the_learning_rate() -> None:
    lrs = [0.1 * 0.5 ** (t // 2) for t in range(5)]

    def ref(p, g, s, t):
        return p - lrs[t - 1] * g, s
    params, _ = run_opt(optim.SGD(optim.step_decay(0.1, every=2, factor=0.5)))
    want = run_ref(ref, 0)
    np.testing.assert_allclose(params["x"], want["x"], rtol=1e-12)


def test_clip_by_global_norm() -> None:
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert optim.global_norm(grads) == pytest.approx(5.0)
    clipped = optim.clip_by_global_norm(grads, 1.0)
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0])
    np.testing.assert_allclose(clipped["b"], [[0.8]])
    same = optim.clip_by_global_norm(grads, 10.0)
    np.testing.assert_allclose(same["a"], grads["a"])
    # as an option: SGD with clip_norm steps along the clipped gradient
    opt = optim.SGD(1.0, clip_norm=1.0)
    params = {"a": np.zeros(2), "b": np.zeros((1, 1))}
    new, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(new["a"], [-0.6, 0.0])


def test_float32_stays_float32() -> None:
    params = {"w": np.ones(3, np.float32)}
    for make, _, _ in CASES:
        opt = make()
        new, state = opt.update({"w": np.full(3, 0.5, np.float32)}, opt.init(params), params)
        assert new["w"].dtype == np.float32
        assert all(state[s]["w"].dtype == np.float32 for s in opt.slots)


def test_hyperparameters_are_state() -> None:
    opt = optim.Adam(0.01)
    state = opt.init({"w": np.zeros(2)})
    assert sorted(state["hyper"]) == ["b1", "b2", "eps", "learning_rate"]
    scheduled = optim.SGD(optim.warmup(optim.cosine_decay(0.5, 100), 10)).init({"w": np.ones(1)})
    assert scheduled["hyper"]["learning_rate"] == {
        "schedule": {"value": 0.5, "steps": 100.0, "final": 0.0}, "steps": 10.0}
    assert sorted(state) == ["hyper", "m", "step", "v"]
    assert "momentum" not in optim.SGD(0.1).init({"w": np.zeros(2)})["hyper"]
    assert "Adam(learning_rate=0.01" in repr(opt)


def test_errors() -> None:
    with pytest.raises(tj.ArgumentError, match="nesterov"):
        optim.SGD(0.1, nesterov=True)
    with pytest.raises(tj.ArgumentError, match="learning_rate must be a number"):
        optim.SGD(-1.0)
    with pytest.raises(tj.ArgumentError, match="schedule.steps must be a number >= 0"):
        optim.SGD(optim.warmup(optim.cosine_decay(0.5, -1), 10))
    with pytest.raises(tj.ArgumentError, match="not a tj.optimizers schedule"):
        optim.SGD(lambda step: 0.1)
    with pytest.raises(tj.ArgumentError, match="float arrays"):
        optim.SGD(0.1).init({"w": np.zeros(2, int)})
    opt = optim.SGD(0.1)
    with pytest.raises(tj.ArgumentError, match="structure"):
        opt.update({"v": np.zeros(2)}, opt.init({"w": np.zeros(2)}), {"w": np.zeros(2)})


class FakeVariable:
    """What Optimizer.apply needs of a variable: .numpy() and .assign()."""

    def __init__(self, value):
        self.value = np.array(value, dtype=float)

    def numpy(self):
        return self.value.copy()

    def assign(self, value):
        self.value = np.asarray(value)


def test_apply_updates_variables_in_place() -> None:
    variables = [FakeVariable(start()["x"]), FakeVariable(start()["y"])]
    opt = optim.Adam(0.05)
    for _ in range(5):
        grads = quad_grad({"x": variables[0].numpy(), "y": variables[1].numpy()})
        opt.apply([grads["x"], grads["y"]], variables)
    want = run_ref(adam_ref(0.05), 2)
    np.testing.assert_allclose(variables[0].value, want["x"], rtol=1e-12)
    np.testing.assert_allclose(variables[1].value, want["y"], rtol=1e-12)
    with pytest.raises(tj.ArgumentError, match="1 gradients for 2 variables"):
        opt.apply([grads["x"]], variables)


def test_apply_with_tj_variables_and_gradient_tape() -> None:
    w, b = tj.Variable(np.array([0.5, -1.0, 2.0]), name="w"), tj.Variable(np.zeros(2), name="b")
    opt = optim.SGD(0.1, momentum=0.9)
    for _ in range(5):
        with tj.GradientTape() as tape:
            loss = 0.5 * np.sum(A * w ** 2) - np.sum(B * w) + np.sum((b - 1.0) ** 2)
        opt.apply(tape.gradient(loss, [w, b]), [w, b])
    want = run_ref(sgd_ref(0.1, 0.9), 1)
    np.testing.assert_allclose(w.numpy(), want["x"], rtol=1e-12)
    assert isinstance(w, tj.Variable) and w.numpy().shape == (3,)


def make_train_step(opt):
    loss_and_grad = tj.value_and_grad(quad)

    def train_step(params, state):
        loss, grads = loss_and_grad(params)
        params, state = opt.update(grads, state, params)
        return params, state, loss
    return loss_and_grad, train_step


def test_jit_training_step_matches_eager_and_never_retraces() -> None:
    opt = optim.Adam(optim.warmup(optim.cosine_decay(0.1, 20), 3), clip_norm=2.0)
    _, train_step = make_train_step(opt)
    step = tj.jit(train_step)
    params, state = start(), opt.init(start())
    eager_p, eager_s = start(), opt.init(start())
    for _ in range(6):
        params, state, loss = step(params, state)
        eager_p, eager_s, eager_loss = train_step(eager_p, eager_s)
        state["hyper"]["b1"] = np.asarray(0.8)        # a new hyperparameter value
        eager_s["hyper"]["b1"] = np.asarray(0.8)
    for k in params:
        np.testing.assert_allclose(params[k], eager_p[k], rtol=1e-12)
    assert loss == pytest.approx(eager_loss)
    info = step.cache_info()
    assert (info["traces"], info["hits"]) == (1, 5)


def test_schedule_numbers_are_run_time_values() -> None:
    """Schedules of other lengths and peaks give the same tape: the program is reused."""
    tapes = set()
    for opt in (optim.Adam(optim.cosine_decay(0.1, 20)), optim.Adam(optim.cosine_decay(0.3, 7))):
        params = start()
        tapes.add(str(tj.make_tape(opt.update)(quad_grad(params), opt.init(params), params)))
    assert len(tapes) == 1


def test_jit_training_step_on_numba_is_one_native_call(tmp_path, monkeypatch) -> None:
    pytest.importorskip("numba")
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    config.reload()
    opt = optim.SGD(optim.cosine_decay(0.2, 10), momentum=0.9)
    loss_and_grad, train_step = make_train_step(opt)
    step = tj.jit(train_step, backend="numba")
    params, state = start(), opt.init(start())
    losses = []
    for _ in range(10):
        params, state, loss = step(params, state)
        losses.append(loss)
    assert losses[-1] < losses[0]
    info = step.cache_info()
    assert (info["traces"], info["compiles"] + info["disk_loads"], info["hits"]) == (1, 1, 9)
    # the gradient was inlined into the step's program: it never ran a program of its own
    inner = loss_and_grad.cache_info()
    assert (inner["traces"], inner["hits"], inner["programs"]) == (0, 0, 0)
    eager_p, eager_s = start(), opt.init(start())
    for _ in range(10):
        eager_p, eager_s, _ = train_step(eager_p, eager_s)
    np.testing.assert_allclose(params["x"], eager_p["x"], rtol=1e-10)
    assert state["step"] == 10.0 and math.isfinite(losses[-1])
