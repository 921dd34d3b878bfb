"""Optimizers in optax's and Keras's conventions: each named optimizer against a hand-written
numpy loop of its published formula (float32 and float64, compiled: one tj.jit program steps
every optimizer), `update` + `apply_updates` == `step`, the named optimizers == their chains,
weight-decay masks, schedules, clipping, `apply_gradients` on Variables (a GradientTape loop
reaching the functional loop's parameters), and a tj.jit training step traced once and run as
one native call per step."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit import optimizers as optim

A = np.array([1.0, 4.0, 0.5])
B = np.array([1.0, -2.0, 0.3])
STEPS = 5


def quad(p):
    return (0.5 * np.sum(A * p["x"] ** 2) - np.sum(B * p["x"]) + np.sum(p["y"] ** 2)
            + 0.5 * np.sum(p["z"] ** 2) + np.sum(p["e"] ** 2))


def quad_grad(p):
    """quad's gradient, in each leaf's dtype; leaves of colliding shapes: (3,), (1, 2) with a
    size-1 axis, (2, 2) square, (0, 3) empty."""
    x = p["x"]
    return {"x": A.astype(x.dtype) * x - B.astype(x.dtype), "y": 2.0 * p["y"], "z": p["z"],
            "e": 2.0 * p["e"]}


def start(dtype=np.float64):
    return {"x": np.array([0.5, -1.0, 2.0], dtype), "y": np.array([[1.0, -0.5]], dtype),
            "z": np.array([[0.3, -2.0], [1.5, 0.25]], dtype), "e": np.zeros((0, 3), dtype)}


# ---- the published formulas, leaf by leaf: update(p, g, slots, t) -> (new p, slots) -------------

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


def run_ref(update, slots, dtype=np.float64, steps=STEPS, clip_norm=None, decay=None):
    """The hand-written loop; `clip_norm` clips the gradients' global norm first; `decay` says
    which leaves an update's weight decay applies to (the others get `update` of 0 decay)."""
    params = start(dtype)
    state = {k: [np.zeros_like(v) for _ in range(slots)] for k, v in params.items()}
    for t in range(1, steps + 1):
        grads = quad_grad(params)
        if clip_norm is not None:
            norm = math.sqrt(sum(float(np.sum(np.square(g.astype(float)))) for g in grads.values()))
            grads = {k: g * g.dtype.type(min(1.0, clip_norm / norm)) for k, g in grads.items()}
        for k in params:
            rule = update if decay is None or decay[k] else decay["other"]
            params[k], state[k] = rule(params[k], grads[k], state[k], t)
    return params


CASES = {
    "sgd": (lambda: optim.SGD(0.1), sgd_ref(0.1), 0),
    "momentum": (lambda: optim.SGD(0.1, momentum=0.9), sgd_ref(0.1, 0.9), 1),
    "nesterov": (lambda: optim.SGD(0.1, momentum=0.9, nesterov=True), sgd_ref(0.1, 0.9, True), 1),
    "sgd-wd": (lambda: optim.SGD(0.1, momentum=0.5, weight_decay=0.01), sgd_ref(0.1, 0.5, wd=0.01),
               1),
    "adam": (lambda: optim.Adam(0.05), adam_ref(0.05), 2),
    "adam-l2": (lambda: optim.Adam(0.05, weight_decay=0.1), adam_ref(0.05, wd=0.1), 2),
    "adamw": (lambda: optim.AdamW(0.05, weight_decay=0.1), adam_ref(0.05, wd=0.1, decoupled=True),
              2),
    "rmsprop": (lambda: optim.RMSprop(0.01), rmsprop_ref(0.01), 1),
    "adagrad": (lambda: optim.Adagrad(0.1), adagrad_ref(0.1), 1),
}
OPTIMIZERS = {name: make() for name, (make, _, _) in CASES.items()}
# AdamW that leaves the bias-like leaves (y, e) undecayed, the mask as a tree and as a function
MASK = {"x": True, "y": False, "z": True, "e": False}
MASKED = {"adamw-mask": optim.AdamW(0.05, weight_decay=0.1, mask=MASK),
          "adamw-mask-fn": optim.AdamW(0.05, weight_decay=0.1,
                                       mask=lambda p: {k: k in ("x", "z") for k in p}),
          "clip-adam": optim.chain(optim.clip_by_global_norm(1.0), optim.scale_by_adam(),
                                   optim.scale_by_learning_rate(0.05))}
ALL = {**OPTIMIZERS, **MASKED}
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])


def _steps(opt, params, steps=STEPS):
    """The optax loop: update, then apply_updates."""
    state = opt.init(params)
    for _ in range(steps):
        updates, state = opt.update(quad_grad(params), state, params)
        params = optim.apply_updates(params, updates)
    return params, state


def _close(got, want, dtype):
    for k in want:
        assert got[k].dtype == dtype and got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12 if dtype == np.float64 else 2e-5,
                                   atol=1e-15 if dtype == np.float64 else 1e-5, err_msg=k)


@DTYPES
@pytest.mark.parametrize("name", list(CASES))
def test_update_matches_the_published_formula(name, dtype) -> None:
    _, ref, slots = CASES[name]
    params, state = _steps(OPTIMIZERS[name], start(dtype))
    _close(params, run_ref(ref, slots, dtype), dtype)
    assert state["step"] == STEPS
    for slot in set(state) - {"step", "hyper"}:
        assert all(leaf.dtype == dtype for leaf in tj.pytree.flatten(state[slot])[0])


@DTYPES
def test_masks_and_clipping(dtype) -> None:
    decayed = {**MASK, "other": adam_ref(0.05)}
    want = run_ref(adam_ref(0.05, wd=0.1, decoupled=True), 2, dtype, decay=decayed)
    _close(_steps(MASKED["adamw-mask"], start(dtype))[0], want, dtype)
    _close(_steps(MASKED["adamw-mask-fn"], start(dtype))[0], want, dtype)
    assert not np.allclose(want["x"], run_ref(adam_ref(0.05), 2, dtype)["x"])  # decay shows
    _close(_steps(MASKED["clip-adam"], start(dtype))[0],
           run_ref(adam_ref(0.05), 2, dtype, clip_norm=1.0), dtype)


# every rule in one chain, compiled: one program per dtype
EVERY_RULE = optim.chain(
    optim.clip_by_global_norm(3.0),
    optim.add_decayed_weights(0.1, mask=lambda p: {k: v.ndim == 2 for k, v in p.items()}),
    optim.trace(0.5, nesterov=True), optim.clip(0.5), optim.scale_by_rms(0.9),
    optim.scale_by_adam(), optim.scale_by_rss(), optim.scale_by_schedule(
        optim.cosine_decay(0.2, 4)), optim.scale(-1.0))


@tj.jit
def every_rule_step(params, state):
    updates, state = EVERY_RULE.update(quad_grad(params), state, params)
    return optim.apply_updates(params, updates), state


def every_rule_ref(dtype, steps=STEPS):
    """EVERY_RULE by hand, leaf by leaf (the global norm over all leaves)."""
    p = start(dtype)
    z = {k: [np.zeros_like(v) for _ in range(5)] for k, v in p.items()}   # v, s, m, n, q
    for t in range(1, steps + 1):
        g = quad_grad(p)
        norm = math.sqrt(sum(float(np.sum(np.square(x.astype(float)))) for x in g.values()))
        for k in p:
            v, s, m, n, q = z[k]
            u = g[k] * dtype(min(1.0, 3.0 / norm))
            u = u + 0.1 * p[k] if p[k].ndim == 2 else u
            v = 0.5 * v + u
            u = np.clip(u + 0.5 * v, -0.5, 0.5)
            s = 0.9 * s + 0.1 * u * u
            u = u / (np.sqrt(s) + 1e-8)
            m, n = 0.9 * m + 0.1 * u, 0.999 * n + 0.001 * u * u
            u = (m / (1 - 0.9 ** t)) / (np.sqrt(n / (1 - 0.999 ** t)) + 1e-8)
            q = q + u * u
            u = u / (np.sqrt(q) + 1e-10)
            lr = 0.2 * 0.5 * (1 + math.cos(math.pi * min(t - 1, 4) / 4))
            p[k], z[k] = p[k] - lr * u, [v, s, m, n, q]
    return p


@DTYPES
def test_every_rule_matches_its_formula(dtype) -> None:
    params, state = _steps(EVERY_RULE, start(dtype))
    _close(params, every_rule_ref(dtype), dtype)
    assert [s.get("step") for s in state] == [None] * 5 + [STEPS, None, STEPS, None]


def test_every_rule_compiled() -> None:
    """float32 (float64 programs: the training steps below)."""
    params, state = start(np.float32), EVERY_RULE.init(start(np.float32))
    for _ in range(STEPS):      # the first call compiles; later calls run the program
        params, state = every_rule_step(params, state)
    _close(params, every_rule_ref(np.float32), np.float32)
    info = every_rule_step.cache_info()
    assert (info["traces"], info["hits"]) == (1, STEPS - 1)


def test_step_is_update_then_apply_updates_and_never_doubles() -> None:
    for name, opt in ALL.items():
        params, state = start(), ALL[name].init(start())
        for _ in range(3):
            grads = quad_grad(params)
            stepped, s1 = opt.step(grads, state, params)
            updates, state = opt.update(grads, state, params)
            params = optim.apply_updates(params, updates)
            for k in params:
                np.testing.assert_array_equal(stepped[k], params[k])
            assert tj.pytree.flatten(s1)[1] == tj.pytree.flatten(state)[1]
    # optax's loop: the update is -lr*g, not the new parameters (which would double them)
    opt = optim.SGD(0.1)
    p = {"w": np.array([1.0, -2.0])}
    updates, _ = opt.update({"w": np.array([0.5, 1.0])}, opt.init(p), p)
    np.testing.assert_allclose(updates["w"], [-0.05, -0.1])
    np.testing.assert_allclose(optim.apply_updates(p, updates)["w"], [0.95, -2.1])


def test_apply_updates_keeps_dtypes_and_checks_structure() -> None:
    p = {"a": np.ones(2, np.float32), "b": np.ones((1, 1))}
    new = optim.apply_updates(p, {"a": np.full(2, 0.5), "b": np.full((1, 1), -1.0)})
    assert new["a"].dtype == np.float32 and new["b"].dtype == np.float64
    np.testing.assert_array_equal(new["a"], [1.5, 1.5])
    with pytest.raises(tj.ArgumentError, match="apply_updates: the updates do not match"):
        optim.apply_updates(p, {"a": np.ones(2)})
    with pytest.raises(tj.ArgumentError, match=r"params_b has shape \(1, 1\) in the "
                                               r"parameters, \(1,\) in the updates"):
        optim.apply_updates(p, {"a": np.ones(2), "b": np.ones(1)})


def test_gradients_of_another_shape_are_refused() -> None:
    """A gradient kept with keepdims, (3, 1) for a (3,) bias: numpy broadcasting made the
    parameters (3, 3), silently; compiled steps (tj.jit) refuse it too."""
    opt = tj.optimizers.Adam(0.1)
    params = {"b": np.zeros(3), "w": np.ones((3, 3))}
    state = opt.init(params)
    bad = {"b": np.ones((3, 1)), "w": np.ones((3, 3))}
    with pytest.raises(tj.ArgumentError, match=r"Adam.update: the gradients do not match the "
                                               r"parameters: params_b has shape \(3,\)"):
        opt.step(bad, state, params)
    with pytest.raises(tj.ArgumentError, match="the gradients do not match"):
        tj.jit(opt.step)(bad, state, params)
    sgd = tj.optimizers.SGD(0.1)
    with pytest.raises(tj.ArgumentError, match="the gradients do not match"):
        sgd.update({"b": np.ones(4), "w": np.ones((3, 3))}, sgd.init(params), params)


CHAINS = {
    "sgd": lambda: optim.chain(optim.scale_by_learning_rate(0.1)),
    "momentum": lambda: optim.chain(optim.trace(0.9), optim.scale_by_learning_rate(0.1)),
    "nesterov": lambda: optim.chain(optim.trace(0.9, nesterov=True), optim.scale(-0.1)),
    "sgd-wd": lambda: optim.chain(optim.add_decayed_weights(0.01), optim.trace(0.5),
                                  optim.scale(-0.1)),
    "adam": lambda: optim.chain(optim.scale_by_adam(), optim.scale_by_learning_rate(0.05)),
    "adam-l2": lambda: optim.chain(optim.add_decayed_weights(0.1), optim.scale_by_adam(),
                                   optim.scale_by_learning_rate(0.05)),
    "adamw": lambda: optim.chain(optim.scale_by_adam(), optim.add_decayed_weights(0.1),
                                 optim.scale_by_learning_rate(0.05)),
    "rmsprop": lambda: optim.chain(optim.scale_by_rms(0.99), optim.scale(-0.01)),
    "adagrad": lambda: optim.chain(optim.scale_by_rss(), optim.scale_by_learning_rate(0.1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_named_optimizers_are_their_chains(name) -> None:
    named, _ = _steps(OPTIMIZERS[name], start())
    chained, state = _steps(CHAINS[name](), start())
    for k in named:
        np.testing.assert_allclose(chained[k], named[k], rtol=1e-14, atol=1e-16)
    assert isinstance(state, tuple)


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
    lrs = [0.1 * 0.5 ** (t // 2) for t in range(STEPS)]

    def ref(p, g, s, t):
        return p - lrs[t - 1] * g, s
    want = run_ref(ref, 0)
    sched = optim.step_decay(0.1, every=2, factor=0.5)
    for opt in (optim.SGD(sched), optim.chain(optim.scale_by_schedule(sched), optim.scale(-1.0))):
        params, _ = _steps(opt, start())
        np.testing.assert_allclose(params["x"], want["x"], rtol=1e-12)


def test_clipping() -> None:
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert optim.global_norm(grads) == pytest.approx(5.0)
    clip = optim.clip_by_global_norm(1.0)
    clipped, _ = clip.update(grads, clip.init(grads))
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0])
    np.testing.assert_allclose(clipped["b"], [[0.8]])
    big = optim.clip_by_global_norm(10.0)
    np.testing.assert_array_equal(big.update(grads, big.init(grads))[0]["a"], grads["a"])
    by_value = optim.clip(3.5)
    np.testing.assert_array_equal(by_value.update(grads, by_value.init(grads))[0]["b"], [[3.5]])
    # as an option: SGD with clip_norm steps along the clipped gradient
    opt = optim.SGD(1.0, clip_norm=1.0)
    params = {"a": np.zeros(2), "b": np.zeros((1, 1))}
    new, _ = opt.step(grads, opt.init(params), params)
    np.testing.assert_allclose(new["a"], [-0.6, 0.0])


def test_hyperparameters_are_state() -> None:
    opt = optim.Adam(0.01)
    state = opt.init({"w": np.zeros(2)})
    assert sorted(state["hyper"]) == ["b1", "b2", "eps", "learning_rate"]
    assert sorted(state) == ["hyper", "m", "step", "v"]
    scheduled = optim.SGD(optim.warmup(optim.cosine_decay(0.5, 100), 10)).init({"w": np.ones(1)})
    assert scheduled["hyper"]["learning_rate"] == {
        "schedule": {"value": 0.5, "steps": 100.0, "final": 0.0}, "steps": 10.0}
    assert "momentum" not in optim.SGD(0.1).init({"w": np.zeros(2)})["hyper"]
    sgd = optim.SGD(0.1, momentum=0.9, clip_norm=2.0, weight_decay=0.1).init({"w": np.zeros(2)})
    assert sorted(sgd["hyper"]) == ["clip_norm", "learning_rate", "momentum", "weight_decay"]
    assert sorted(optim.RMSprop().init({"w": np.zeros(2)})["hyper"]) == [
        "alpha", "eps", "learning_rate"]
    assert "Adam(learning_rate=0.01" in repr(opt)
    assert repr(optim.chain(optim.clip(1.0), optim.scale(-0.5))) == \
        "chain(clip(max_delta=1.0), scale(-0.5))"
    # a transformation keeps a step count only where it reads one
    assert sorted(optim.scale(-0.1).init({"w": np.zeros(2)})) == ["hyper"]
    assert "step" in optim.scale_by_adam().init({"w": np.zeros(2)})


def test_errors() -> None:
    with pytest.raises(tj.ArgumentError, match="nesterov"):
        optim.SGD(0.1, nesterov=True)
    with pytest.raises(tj.ArgumentError, match="SGD: learning_rate must be a number >= 0"):
        optim.SGD(-1.0)
    with pytest.raises(tj.ArgumentError, match="SGD: momentum must be a number >= 0"):
        optim.SGD(0.1, momentum=-0.5)
    with pytest.raises(tj.ArgumentError, match="schedule_steps must be a number >= 0"):
        optim.SGD(optim.warmup(optim.cosine_decay(0.5, -1), 10))
    with pytest.raises(tj.ArgumentError, match="not a tj.optimizers schedule"):
        optim.SGD(lambda step: 0.1)
    with pytest.raises(tj.ArgumentError, match="float arrays"):
        optim.SGD(0.1).init({"w": np.zeros(2, int)})
    opt = optim.SGD(0.1)
    with pytest.raises(tj.ArgumentError, match="the gradients do not match the parameters: key 'w'"):
        opt.update({"v": np.zeros(2)}, opt.init({"w": np.zeros(2)}), {"w": np.zeros(2)})
    with pytest.raises(tj.ArgumentError, match="SGD.update: the state must be"):
        opt.update({"w": np.zeros(2)}, None, {"w": np.zeros(2)})
    with pytest.raises(tj.ArgumentError, match="scale: step_size must be a number"):
        optim.scale(optim.cosine_decay(0.1, 10))
    with pytest.raises(tj.ArgumentError, match="scale_by_schedule: give a schedule"):
        optim.scale_by_schedule(0.1)
    with pytest.raises(tj.ArgumentError, match="is not a gradient transformation"):
        optim.chain(optim.scale(1.0), np.sin)
    chained = optim.chain(optim.scale(1.0))
    with pytest.raises(tj.ArgumentError, match="a tuple of 1 states"):
        chained.update({"w": np.zeros(2)}, {}, None)
    decay = optim.add_decayed_weights(0.1)
    with pytest.raises(tj.ArgumentError, match="needs the parameters"):
        decay.update({"w": np.zeros(2)}, decay.init({"w": np.zeros(2)}))
    with pytest.raises(tj.ArgumentError, match="mask= picks the parameters"):
        optim.Adam(0.1, mask={"w": True})


@pytest.mark.parametrize("mask, match", [({"w": True}, "the mask has structure"),
                                         ({"w": True, "b": 1}, "a mask holds Python bools"),
                                         (lambda p: [True, False], "the mask has structure")])
def test_bad_masks(mask, match) -> None:
    opt = optim.AdamW(0.1, mask=mask)
    p = {"w": np.ones(2), "b": np.ones(1)}
    with pytest.raises(tj.ArgumentError, match=f"add_decayed_weights: {match}"):
        opt.update(p, opt.init(p), p)


# ---- Keras: apply_gradients on variables --------------------------------------------------------

class FakeVariable:
    """What apply_gradients needs of a variable: .numpy() and .assign()."""

    def __init__(self, value):
        self.value = np.array(value, dtype=float)

    def numpy(self):
        return self.value.copy()

    def assign(self, value):
        self.value = np.asarray(value)


def test_apply_gradients_updates_variables_in_place() -> None:
    names = list(start())
    variables = {k: FakeVariable(v) for k, v in start().items()}
    opt = optim.Adam(0.05)
    for _ in range(STEPS):
        grads = quad_grad({k: v.numpy() for k, v in variables.items()})
        opt.apply_gradients((grads[k], variables[k]) for k in names)
    want = run_ref(adam_ref(0.05), 2)
    for k in names:
        np.testing.assert_allclose(variables[k].value, want[k], rtol=1e-12, err_msg=k)
    with pytest.raises(tj.ArgumentError, match="1 gradients for 2 variables"):
        opt.apply([grads["x"]], [variables["x"], variables["y"]])
    with pytest.raises(tj.ArgumentError, match="a variable appears twice"):
        opt.apply([grads["x"], grads["x"]], [variables["x"], variables["x"]])
    with pytest.raises(tj.ArgumentError, match=r"a gradient of shape \(2,\)"):
        opt.apply_gradients([(np.ones(2), variables["x"])])
    with pytest.raises(tj.ArgumentError, match="no gradients"):
        opt.apply_gradients([(None, variables["x"])])
    with pytest.raises(tj.ArgumentError, match="is not a variable"):
        opt.apply_gradients([(np.ones(2), np.ones(2))])


def test_apply_gradients_keeps_state_per_variable() -> None:
    """Variables join on first use; a call's step counts for all (as Keras's iterations); a
    None gradient leaves its variable (and its moments) as they are."""
    u, w = FakeVariable([1.0, -2.0]), FakeVariable([[0.5]])
    opt = optim.SGD(0.1, momentum=0.9)
    calls = [([0.5, 1.0], None), ([1.0, 1.0], [[2.0]]), ([0.0, 1.0], [[1.0]]), (None, [[1.0]])]
    ref = {"u": (np.array([1.0, -2.0]), np.zeros(2)), "w": (np.array([[0.5]]), np.zeros((1, 1)))}
    for gu, gw in calls:
        opt.apply_gradients([(None if gu is None else np.array(gu), u),
                             (None if gw is None else np.array(gw), w)])
        for key, g in (("u", gu), ("w", gw)):
            if g is not None:
                p, v = ref[key]
                v = 0.9 * v + np.array(g)
                ref[key] = (p - 0.1 * v, v)
    np.testing.assert_allclose(u.value, ref["u"][0], rtol=1e-14)
    np.testing.assert_allclose(w.value, ref["w"][0], rtol=1e-14)
    assert opt._variable_states.state["step"] == len(calls)


def test_keras_loop_with_gradient_tape_matches_the_functional_loop() -> None:
    """Variables named like the functional loop's keys; a mask function sees those names."""
    variables = {k: tj.Variable(v, name=k) for k, v in start().items()}
    keras = optim.AdamW(0.05, weight_decay=0.1, mask=lambda p: {k: k in ("x", "z") for k in p})
    functional = MASKED["adamw-mask"]
    params, state = start(), functional.init(start())
    for _ in range(STEPS):
        with tj.GradientTape() as tape:
            loss = quad(variables)
        grads = tape.gradient(loss, list(variables.values()))
        keras.apply_gradients(zip(grads, variables.values()))
        params, state = functional.step(quad_grad(params), state, params)
    for k in params:
        assert isinstance(variables[k], tj.Variable)
        np.testing.assert_allclose(variables[k].numpy(), params[k], rtol=1e-12, err_msg=k)
    want = run_ref(adam_ref(0.05, wd=0.1, decoupled=True), 2, decay={**MASK,
                                                                    "other": adam_ref(0.05)})
    np.testing.assert_allclose(variables["z"].numpy(), want["z"], rtol=1e-12)


# ---- tj.jit training steps ----------------------------------------------------------------------

def make_train_step(opt):
    loss_and_grad = tj.value_and_grad(quad)

    def train_step(params, state):
        loss, grads = loss_and_grad(params)
        params, state = opt.step(grads, state, params)
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
