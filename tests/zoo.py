"""A zoo of realistic user programs written in plain numpy, as data.

Each `ZooProgram` is a scalar-valued function `fn`, a factory `make_args(dtype)` of small example
arguments (floating-point leaves in `dtype`; seeded, so every call returns the same values), the
`argnums` to differentiate, and whether `fn` returns `(loss, aux)`. The same entries drive the
interpreter tests here and the compiled backends' tests elsewhere: run `fn` on plain numpy for the
expected value, and on tapejit for the value and the gradients. The shapes collide on purpose (a
batch as wide as a layer, square inputs, 3 points in 3-D): different axes of equal length must
never be mixed up.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class ZooProgram:
    name: str
    fn: Callable[..., Any]
    make_args: Callable[..., tuple]   # make_args(dtype=np.float64) -> positional arguments
    argnums: tuple[int, ...] = (0,)
    has_aux: bool = False
    second_order: bool = False        # cheap enough for grad-of-grad checks

    def __repr__(self) -> str:
        return self.name


def _rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# --- MLP with softmax cross-entropy ------------------------------------------------------------
def mlp_loss(params: dict, x: np.ndarray, labels: np.ndarray) -> Any:
    h = np.tanh(x @ params["w1"] + params["b1"])
    h = np.tanh(h @ params["w2"] + params["b2"])
    logits = h @ params["w3"] + params["b3"]
    logits = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(np.sum(labels * log_probs, axis=1))


def mlp_args(dtype: Any = np.float64) -> tuple:
    rng, sizes = _rng(), [4, 8, 6, 3]
    params = {}
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"w{k}"] = (rng.standard_normal((m, n)) / np.sqrt(m)).astype(dtype)
        params[f"b{k}"] = (0.1 * rng.standard_normal(n)).astype(dtype)
    x = rng.standard_normal((8, 4)).astype(dtype)     # a batch as wide as the first layer
    labels = np.eye(3, dtype=dtype)[rng.integers(0, 3, size=8)]
    return params, x, labels


# --- logsumexp --------------------------------------------------------------------------------
def logsumexp(x: np.ndarray) -> Any:
    m = np.max(x, axis=-1, keepdims=True)
    lse = np.squeeze(m, -1) + np.log(np.sum(np.exp(x - m), axis=-1))
    return np.sum(lse * np.arange(1, x.shape[0] + 1, dtype=x.dtype))


def logsumexp_args(dtype: Any = np.float64) -> tuple:
    return (3.0 * _rng().standard_normal((5, 5)).astype(dtype),)   # square


# --- layer norm -------------------------------------------------------------------------------
def layer_norm_loss(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> Any:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5) * gamma + beta
    return np.sum(np.sin(y))


def layer_norm_args(dtype: Any = np.float64) -> tuple:
    rng = _rng()
    return (rng.standard_normal((6, 6)).astype(dtype),     # as many rows as features
            (1.0 + 0.1 * rng.standard_normal(6)).astype(dtype),
            (0.1 * rng.standard_normal(6)).astype(dtype))


# --- Lennard-Jones energy ---------------------------------------------------------------------
def lennard_jones(pos: np.ndarray, sigma: float = 1.0, eps: float = 1.0) -> Any:
    n = pos.shape[0]
    diff = pos[:, None, :] - pos[None, :, :]
    r2 = np.sum(diff ** 2, axis=-1)
    diag = np.eye(n, dtype=bool)
    r2 = np.where(diag, 1.0, r2)           # keep the diagonal finite (and its gradient)
    s6 = (sigma ** 2 / r2) ** 3
    pair = 4.0 * eps * (s6 ** 2 - s6)
    return 0.5 * np.sum(np.where(diag, 0.0, pair))


def lennard_jones_args(dtype: Any = np.float64) -> tuple:
    grid = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=float)    # 3 points in 3-D
    return ((1.2 * grid + 0.05 * _rng().standard_normal((3, 3))).astype(dtype),)


# --- one RK4 step of the Lotka-Volterra ODE ---------------------------------------------------
def lotka_volterra(state: np.ndarray, theta: np.ndarray) -> Any:
    prey, pred = state[0], state[1]
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]
    return np.stack([a * prey - b * prey * pred, c * prey * pred - d * pred])


def rk4_loss(state: np.ndarray, theta: np.ndarray, dt: float = 0.1) -> Any:
    k1 = lotka_volterra(state, theta)
    k2 = lotka_volterra(state + dt / 2 * k1, theta)
    k3 = lotka_volterra(state + dt / 2 * k2, theta)
    k4 = lotka_volterra(state + dt * k3, theta)
    new = state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.sum((new - np.array([1.0, 0.5], dtype=state.dtype)) ** 2)


def rk4_args(dtype: Any = np.float64) -> tuple:
    return (np.array([1.3, 0.7], dtype), np.array([1.1, 0.4, 0.3, 0.9], dtype))


# --- index assignment -------------------------------------------------------------------------
def index_assign_loss(x: np.ndarray, v: np.ndarray) -> Any:
    y = np.zeros_like(x)
    y[1:4] += x[:3] * v
    y[0] = x[5] ** 2
    y[-1] = np.sum(v)
    z = x.copy()
    z[2:5] = np.tanh(y[1:4])
    return np.sum(y ** 2) + np.sum(z * x)


def index_assign_args(dtype: Any = np.float64) -> tuple:
    rng = _rng()
    return rng.standard_normal(7).astype(dtype), rng.standard_normal(3).astype(dtype)


# --- 20 explicit Euler steps of a damped pendulum (unrolled Python loop) ----------------------
def euler_pendulum(state: np.ndarray, params: np.ndarray) -> Any:
    damping, omega2 = params[0], params[1]
    dt = 0.05
    for _ in range(20):
        theta, vel = state[0], state[1]
        acc = -omega2 * np.sin(theta) - damping * vel
        state = state + dt * np.stack([vel, acc])
    return state[0] ** 2 + 0.5 * state[1] ** 2


def euler_args(dtype: Any = np.float64) -> tuple:
    return np.array([0.8, -0.2], dtype), np.array([0.3, 2.0], dtype)


# --- a loss with auxiliary output -------------------------------------------------------------
def regression_with_aux(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> Any:
    pred = np.tanh(x @ w)
    err = pred - y
    loss = np.mean(err ** 2) + 0.01 * np.sum(w * w)
    return loss, {"pred": pred, "max_err": np.max(np.abs(err))}


def regression_args(dtype: Any = np.float64) -> tuple:
    rng = _rng()
    return (rng.standard_normal(4).astype(dtype), rng.standard_normal((4, 4)).astype(dtype),
            rng.standard_normal(4).astype(dtype))         # as many samples as features


ZOO = [
    ZooProgram("mlp_softmax_xent", mlp_loss, mlp_args, (0,)),
    ZooProgram("logsumexp", logsumexp, logsumexp_args, (0,), second_order=True),
    ZooProgram("layer_norm", layer_norm_loss, layer_norm_args, (0, 1, 2), second_order=True),
    ZooProgram("lennard_jones", lennard_jones, lennard_jones_args, (0,), second_order=True),
    ZooProgram("rk4_lotka_volterra", rk4_loss, rk4_args, (0, 1), second_order=True),
    ZooProgram("index_assign", index_assign_loss, index_assign_args, (0, 1)),
    ZooProgram("euler_pendulum_20", euler_pendulum, euler_args, (0, 1)),
    ZooProgram("regression_aux", regression_with_aux, regression_args, (0,), has_aux=True),
]
