"""A TensorFlow-style training loop: tj.Variable, tj.GradientTape, and Keras's apply_gradients.

For code written the TensorFlow way: the parameters are `tj.Variable`s, each step records the
forward pass on a `tj.GradientTape` (eagerly: values are concrete, `print(loss)` works), asks
the tape for the gradients and lets
`tj.optimizers.SGD(...).apply_gradients(zip(grads, variables))` update the variables in place
(the optimizer keeps each variable's momentum). The tape replays a compiled reverse sweep
from the second step on (`tj.tape_cache_info()` counts it). The model: softmax regression plus
one tanh hidden layer on scikit-learn's digits.

    python examples/gradient_tape.py            # 10 epochs, ~96% test accuracy
    python examples/gradient_tape.py --quick    # a few steps (smoke test)

For speed prefer the functional form of examples/mlp_digits.py (`tj.jit` of the whole step):
a tape records every op in Python at every step.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits

import tapejit as tj


class MLP:
    """Two dense layers whose weights are trainable Variables."""

    def __init__(self, sizes: tuple[int, int, int], rng: np.random.Generator) -> None:
        n_in, n_hidden, n_out = sizes
        self.w1 = tj.Variable(rng.normal(scale=n_in ** -0.5, size=(n_in, n_hidden)), name="w1")
        self.b1 = tj.Variable(np.zeros(n_hidden), name="b1")
        self.w2 = tj.Variable(rng.normal(scale=n_hidden ** -0.5, size=(n_hidden, n_out)),
                              name="w2")
        self.b2 = tj.Variable(np.zeros(n_out), name="b2")
        self.trainable_variables = [self.w1, self.b1, self.w2, self.b2]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.tanh(x @ self.w1 + self.b1)
        return h @ self.w2 + self.b2


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(np.eye(logits.shape[1])[labels] * log_probs, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="5 steps: a smoke test")
    args = parser.parse_args()
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order]
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]

    rng = np.random.default_rng(0)
    model = MLP((64, 64, 10), rng)
    optimizer = tj.optimizers.SGD(0.1, momentum=0.9)
    batch, epochs = 50, 1 if args.quick else args.epochs
    steps = 5 if args.quick else len(y_train) // batch
    times = []
    for epoch in range(1, epochs + 1):
        perm = rng.permutation(len(y_train))
        for step in range(steps):
            idx = perm[step * batch:(step + 1) * batch]
            t0 = time.perf_counter()
            with tj.GradientTape() as tape:
                loss = cross_entropy(model(x_train[idx]), y_train[idx])
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            times.append(time.perf_counter() - t0)
        acc = np.mean(np.argmax(model(x_test), axis=1) == y_test)
        print(f"epoch {epoch:2d}  last batch loss {float(loss):.4f}  test accuracy {acc:.3f}")
    print(f"first step (records, derives and compiles the reverse sweep): {times[0]:.2f} s; "
          f"then {1e3 * np.median(times[1:]):.2f} ms per step (median, recording included)")
    print(f"tape cache: {tj.tape_cache_info()}")


if __name__ == "__main__":
    main()
