"""Random numbers in a compiled training loop: a small variational autoencoder with dropout.

Data: 8-dimensional points that lie near a 2-dimensional surface (x = tanh(z A) + noise). The
model encodes a point to the mean and log-variance of a Gaussian over a 2-dimensional code,
samples a code with the reparameterisation trick (z = mu + sigma * eps, eps ~ N(0, 1): the
sample is a differentiable function of mu and sigma), and decodes it; the loss is the squared
reconstruction error plus the KL divergence to N(0, 1). The encoder's hidden layer uses
dropout (a Bernoulli mask, scaled by 1 / keep, during training only).

Both kinds of randomness come from `tj.random` keys. The training step takes a key as an
argument and splits it for the mask and for eps, so the loop passes a new key each step and
the step compiles once (its cache counts are printed). Re-using a key repeats the numbers
exactly: the reparameterised gradient is checked against finite differences with one key.

    python examples/dropout_vae.py            # 1,500 Adam steps
    python examples/dropout_vae.py --quick    # 60 steps (smoke test)
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tapejit as tj

KEEP = 0.9          # dropout keeps each hidden unit with this probability
HIDDEN, CODE = 32, 2


def make_data(n: int, rng: np.random.Generator) -> np.ndarray:
    mixing = rng.normal(size=(CODE, 8))
    return np.tanh(rng.normal(size=(n, CODE)) @ mixing) + 0.05 * rng.normal(size=(n, 8))


def init(rng: np.random.Generator) -> dict:
    def dense(m: int, n: int) -> np.ndarray:
        return rng.normal(size=(m, n)) / np.sqrt(m)
    return {"w1": dense(8, HIDDEN), "b1": np.zeros(HIDDEN), "w_mu": dense(HIDDEN, CODE),
            "w_lv": dense(HIDDEN, CODE) * 0.1, "w2": dense(CODE, HIDDEN),
            "b2": np.zeros(HIDDEN), "w3": dense(HIDDEN, 8)}


def loss(params: dict, x: np.ndarray, key: np.ndarray, train: bool = True) -> np.ndarray:
    h = np.tanh(x @ params["w1"] + params["b1"])
    if train:                                         # dropout: a new mask for every key
        mask_key, noise_key = tj.random.split(key)
        h = np.where(tj.random.bernoulli(mask_key, KEEP, h.shape), h / KEEP, 0.0)
    else:
        noise_key = key
    mu, log_var = h @ params["w_mu"], h @ params["w_lv"]
    eps = tj.random.normal(noise_key, mu.shape)       # the reparameterisation trick
    z = mu + np.exp(0.5 * log_var) * eps
    x_hat = np.tanh(z @ params["w2"] + params["b2"]) @ params["w3"]
    reconstruction = np.mean(np.sum((x_hat - x) ** 2, axis=1))
    kl = np.mean(0.5 * np.sum(np.exp(log_var) + mu ** 2 - 1.0 - log_var, axis=1))
    return reconstruction + 0.1 * kl


def check_gradient(params: dict, x: np.ndarray, key: np.ndarray) -> float:
    """The reparameterised gradient along a random direction against central differences:
    with one key, eps and the dropout mask are the same numbers on every call."""
    direction = {k: np.random.default_rng(1).normal(size=v.shape) for k, v in params.items()}
    grads = tj.grad(loss)(params, x, key)
    analytic = sum(np.sum(grads[k] * direction[k]) for k in params)
    h = 1e-6
    moved = [{k: v + s * h * direction[k] for k, v in params.items()} for s in (1, -1)]
    numeric = (loss(moved[0], x, key) - loss(moved[1], x, key)) / (2 * h)
    return abs(analytic - numeric) / abs(numeric)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--quick", action="store_true", help="60 steps")
    args = parser.parse_args()
    steps = 60 if args.quick else args.steps

    rng = np.random.default_rng(0)
    data = make_data(1280, rng)
    x_train, x_test = data[:1024], data[1024:]
    params = init(rng)
    opt = tj.optimizers.Adam(tj.optimizers.cosine_decay(3e-3, steps))
    state = opt.init(params)

    @tj.jit
    def step(params: dict, state: dict, x: np.ndarray, key: np.ndarray) -> tuple:
        value, grads = tj.value_and_grad(loss)(params, x, key)
        params, state = opt.step(grads, state, params)
        return params, state, value

    evaluate = tj.jit(lambda params, x, key: loss(params, x, key, train=False))
    key = tj.random.key(42)
    print(f"reparameterised gradient vs finite differences: relative error "
          f"{check_gradient(params, x_test[:16], key):.1e}")
    key, sub = tj.random.split(key)
    print(f"test loss before training: {float(evaluate(params, x_test, sub)):.4f}")
    start = time.perf_counter()
    for k in range(steps):
        key, sub = tj.random.split(key)               # a new key per step: no recompile
        batch = x_train[(k * 128) % 1024:][:128]
        params, state, value = step(params, state, batch, sub)
        if (k + 1) % max(steps // 5, 1) == 0:
            print(f"step {k + 1:5d}  training loss {float(value):.4f}")
    elapsed = time.perf_counter() - start
    print(f"test loss after training: {float(evaluate(params, x_test, key)):.4f} "
          f"({steps} steps in {elapsed:.1f} s)")
    info = step.cache_info()
    print(f"step cache: traces {info['traces']}, compiles {info['compiles']}, "
          f"disk loads {info['disk_loads']}, hits {info['hits']}")


if __name__ == "__main__":
    main()
