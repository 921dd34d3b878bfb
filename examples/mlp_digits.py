"""Train a small MLP on scikit-learn's digits with tapejit gradients.

The model, the loss and the optimizer are plain numpy. tapejit differentiates the loss:
`tj.value_and_grad(loss)` traces it once per argument signature (the first call) and compiles
the gradient program with numba (cached on disk: later runs load it), then every later step is
one native call.

    python examples/mlp_digits.py              # full run (~10 s the first time, compiling)
    python examples/mlp_digits.py --quick      # a few steps: a smoke test
    python examples/mlp_digits.py --epochs 60

The digits data set (1,797 8x8 images, 10 classes) ships inside scikit-learn: no download.
Needs `pip install -e ".[examples]"` (scikit-learn).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits

import tapejit as tj

SIZES = (64, 64, 10)
SEED = 0


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, zero biases, as a dict pytree."""
    params = {}
    for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:]), start=1):
        limit = np.sqrt(6.0 / (n_in + n_out))
        params[f"w{i}"] = rng.uniform(-limit, limit, size=(n_in, n_out))
        params[f"b{i}"] = np.zeros(n_out)
    return params


def predict(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Logits of a 64-64-10 tanh MLP."""
    h = np.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params: dict[str, np.ndarray], x: np.ndarray, y_onehot: np.ndarray) -> np.ndarray:
    """Mean softmax cross-entropy, with a numerically stable log-sum-exp."""
    logits = predict(params, x)
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y_onehot * log_probs, axis=1))


def accuracy(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(predict(params, x), axis=1) == y))


def load_data(seed: int) -> tuple[np.ndarray, ...]:
    """Digits scaled to [0, 1], shuffled with a fixed seed, split 80/20 into train/test."""
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    n_train = int(0.8 * len(y))
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--quick", action="store_true", help="a few steps, for a smoke test")
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = load_data(SEED)
    onehot = np.eye(SIZES[-1])[y_train]
    rng = np.random.default_rng(SEED)
    params = init_params(rng)
    velocity = tj.tree_map(np.zeros_like, params)
    loss_and_grad = tj.value_and_grad(loss)

    # The first call traces `loss`, builds its gradient program and compiles it (or loads it
    # from the disk cache); time it on its own.
    batch = slice(0, args.batch_size)
    start = time.perf_counter()
    loss_and_grad(params, x_train[batch], onehot[batch])
    first_call = time.perf_counter() - start

    epochs = 1 if args.quick else args.epochs
    steps_per_epoch = len(y_train) // args.batch_size      # drop the ragged last batch
    if args.quick:
        steps_per_epoch = 5
    step_times = []
    print(f"digits: {len(y_train)} train / {len(y_test)} test, MLP {SIZES}, "
          f"batch {args.batch_size}, {steps_per_epoch} steps per epoch")
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(y_train))
        total = 0.0
        epoch_start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            t0 = time.perf_counter()
            value, grads = loss_and_grad(params, x_train[idx], onehot[idx])
            step_times.append(time.perf_counter() - t0)
            for name in params:       # gradient descent with momentum, in plain numpy
                velocity[name] = args.momentum * velocity[name] - args.lr * grads[name]
                params[name] = params[name] + velocity[name]
            total += float(value)
        rate = steps_per_epoch / (time.perf_counter() - epoch_start)
        print(f"epoch {epoch:3d}  loss {total / steps_per_epoch:.4f}  "
              f"train acc {accuracy(params, x_train, y_train):.3f}  "
              f"test acc {accuracy(params, x_test, y_test):.3f}  {rate:7.0f} steps/s")

    step_ms = 1e3 * float(np.median(step_times))
    print(f"test accuracy: {accuracy(params, x_test, y_test):.4f}")
    print(f"first call (trace + differentiate + compile or cache load): "
          f"{1e3 * first_call:.1f} ms")
    print(f"steady-state step (value_and_grad, median of {len(step_times)}): {step_ms:.3f} ms")


if __name__ == "__main__":
    main()
