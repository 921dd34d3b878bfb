"""Transforms of one function share their programs (sharing.py) while the function reads
equal things by name; never when what it reads changed or cannot be compared cheaply."""
import numpy as np
import pytest

import tapejit as tj

pytestmark = pytest.mark.usefixtures("shared_cache")

SCALE = np.array([1.0, 2.0, 3.0])
BIG = np.ones(200_000)          # 1.6 MB: past what is compared by content
OPTIONS = {"lr": 0.5, "shape": (3,)}


def _loss(w, x):
    return np.sum((w * SCALE - x) ** 2)


def _options_loss(w, x):
    return np.sum((w - x) ** 2) * OPTIONS["lr"]


def _activation(x):
    return np.tanh(x)


def _activated_loss(w):
    return np.sum(_activation(w))


class Settings:
    scale = 2.0


def _settings_loss(w):
    return np.sum(w * Settings.scale)


def _big_loss(w):
    return np.sum(w ** 2) + BIG[0]


def _want(w, x, scale):
    return np.sum((w * scale - x) ** 2), 2 * (w * scale - x) * scale


W, X = np.array([0.5, -1.0, 2.0]), np.array([1.0, 1.0, 1.0])


def _check(got, scale):
    value, grad = got
    want_value, want_grad = _want(W, X, scale)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)


def test_a_transform_made_again_in_a_loop_traces_once():
    infos = []
    for _ in range(4):
        g = tj.value_and_grad(_loss)
        _check(g(W, X), SCALE)
        infos.append(g.cache_info())
    assert [i["traces"] for i in infos] == [1, 0, 0, 0]
    assert all(i["hits"] >= 1 for i in infos[1:])
    assert [tj.jit(_loss)(W, X) for _ in range(2)] == [_want(W, X, SCALE)[0]] * 2


def test_a_global_rebound_or_changed_in_place_traces_again():
    global SCALE
    saved = SCALE
    try:
        tj.value_and_grad(_loss)(W, X)
        SCALE = np.array([2.0, 2.0, 2.0])            # rebound
        g = tj.value_and_grad(_loss)
        _check(g(W, X), SCALE)
        assert g.cache_info()["traces"] == 1
        SCALE[0] = 5.0                               # changed in place
        g = tj.value_and_grad(_loss)
        _check(g(W, X), SCALE)
        assert g.cache_info()["traces"] == 1
        OPTIONS["lr"] = 2.0                          # a number in a dict it reads
        g = tj.grad(_options_loss)
        np.testing.assert_allclose(g(W, X), 2 * (W - X) * 2.0)
        OPTIONS["lr"] = 0.5
        g = tj.grad(_options_loss)
        np.testing.assert_allclose(g(W, X), 2 * (W - X) * 0.5)
        assert g.cache_info()["traces"] == 1
    finally:
        SCALE, OPTIONS["lr"] = saved, 0.5


def test_a_rebound_function_or_a_changed_class_of_yours_traces_again():
    global _activation
    saved = _activation
    try:
        tj.grad(_activated_loss)(W)
        _activation = np.sin                        # a global function rebound
        g = tj.grad(_activated_loss)
        np.testing.assert_allclose(g(W), np.cos(W), rtol=1e-14)
        assert g.cache_info()["traces"] == 1
    finally:
        _activation = saved
    for scale in (2.0, 3.0):                         # a class attribute it reads
        Settings.scale = scale
        g = tj.grad(_settings_loss)
        np.testing.assert_allclose(g(W), np.full(3, scale))
        assert g.cache_info()["traces"] == 1
    Settings.scale = 2.0


def test_what_cannot_be_compared_cheaply_is_not_shared():
    w = np.arange(3.0)
    for _ in range(2):                     # a global array past 1 MiB
        g = tj.grad(_big_loss)
        np.testing.assert_allclose(g(w), 2 * w)
        assert g.cache_info()["traces"] == 1

    class Model:
        def __init__(self):
            self.scale = 3.0

        def loss(self, w):
            return np.sum(w ** 2) * self.scale

    model = Model()
    for scale in (3.0, 4.0):               # a method reads its object's attributes
        model.scale = scale
        g = tj.grad(model.loss)
        np.testing.assert_allclose(g(w), 2 * w * scale)
        assert g.cache_info()["traces"] == 1


def test_options_and_transforms_keep_their_own_programs():
    both = tj.value_and_grad(_loss)(W, X)
    _check(both, SCALE)
    np.testing.assert_allclose(tj.grad(_loss)(W, X), both[1])
    np.testing.assert_allclose(tj.grad(_loss, argnums=1)(W, X), -2 * (W * SCALE - X))
    g = tj.grad(_loss, argnums=(0, 1))
    got = g(W, X)
    assert g.cache_info()["traces"] == 1 and len(got) == 2
    assert tj.jit(_loss)(W, X) == both[0]


def test_a_new_lambda_is_a_new_function():
    for k in range(2):
        g = tj.grad(lambda w, k=k: np.sum(w ** 2) * (k + 1))
        np.testing.assert_allclose(g(W), 2 * W * (k + 1))
        assert g.cache_info()["traces"] == 1


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache directory of this test's own (clear_cache empties it)."""
    from tapejit import config
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


def test_clear_cache_forgets_the_shared_programs(own_cache):
    tj.value_and_grad(_loss)(W, X)
    tj.clear_cache()
    g = tj.value_and_grad(_loss)
    _check(g(W, X), SCALE)
    assert g.cache_info()["traces"] == 1
