"""The main job: train an MLP on scikit-learn's digits, one native call per training step.

    python -m tapejit demo            # or: tapejit demo;  python examples/mlp_digits.py
    python -m tapejit demo --quick    # a few steps (the smoke test)

The model, the loss and the update are plain numpy. `tj.jit(train_step)` traces the step once
(forward sweep, `tj.value_and_grad`'s reverse sweep and the Adam update of `tj.optimizers`),
compiles it with numba into one function (cached on disk: a later run loads it) and calls it
once per batch. The learning rate follows a warm-up + cosine schedule that reads the step count
from the optimizer state, a run-time value: the schedule never recompiles. The digits data set
(1,797 8x8 images, 10 classes) ships inside scikit-learn: no download.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

import numpy as np

import tapejit as tj
from tapejit import optimizers
from tapejit.transforms.cached import what_ran

SIZES = (64, 128, 10)
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
    """Logits of a 64-128-10 tanh MLP."""
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
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("the demo trains on scikit-learn's digits: pip install 'tapejit[examples]'")
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    n_train = int(0.8 * len(y))
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def make_train_step(opt: optimizers.Optimizer, backend: str | None) -> Any:
    """Forward, reverse and update as one compiled program."""
    loss_and_grad = tj.value_and_grad(loss)

    def train_step(params: dict, state: dict, x: np.ndarray, y_onehot: np.ndarray) -> tuple:
        value, grads = loss_and_grad(params, x, y_onehot)
        params, state = opt.step(grads, state, params)
        return params, state, value

    return tj.jit(train_step, backend=backend)


class Progress:
    """One live line on a terminal (redrawn at most 10 times a second); one line per epoch
    otherwise."""

    def __init__(self, total: int) -> None:
        self.total, self.live, self.drawn = total, sys.stdout.isatty(), 0.0

    def show(self, epoch: int, epochs: int, done: int, loss: float, acc: float | None,
             rate: float, final: bool = False) -> None:
        now = time.perf_counter()
        if not final and (not self.live or now - self.drawn < 0.1):
            return
        self.drawn = now
        filled = 20 * done // self.total
        bar = "#" * filled + "." * (20 - filled)
        test = f"  test acc {acc:.3f}" if acc is not None else ""
        line = (f"epoch {epoch:3d}/{epochs} [{bar}] loss {loss:.4f}{test}  "
                f"{rate:8.0f} steps/s")
        print(("\r" + line) if self.live else line, end="\n" if final else "", flush=True)


def main(argv: Sequence[str] | None = None) -> float:
    """Train, print progress and timings; return the test accuracy."""
    parser = argparse.ArgumentParser(prog="tapejit demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (Adam)")
    parser.add_argument("--backend", default=None, help="numba (default) or interpret")
    parser.add_argument("--quick", action="store_true", help="5 steps: a smoke test")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load_data(SEED)
    onehot = np.eye(SIZES[-1])[y_train]
    rng = np.random.default_rng(SEED)
    epochs = 1 if args.quick else args.epochs
    steps_per_epoch = 5 if args.quick else len(y_train) // args.batch_size
    total_steps = epochs * steps_per_epoch
    schedule = optimizers.warmup(optimizers.cosine_decay(args.lr, total_steps), steps_per_epoch)
    opt = optimizers.Adam(schedule)
    params = init_params(rng)
    state = opt.init(params)
    train_step = make_train_step(opt, args.backend)
    print(f"digits: {len(y_train)} train / {len(y_test)} test images, MLP {SIZES}, "
          f"batch {args.batch_size}, {opt!r}")

    # The first call traces and differentiates the step and runs it on the numpy interpreter,
    # as the next calls do until the compile would pay (cache_info's "interpreted"), or loads
    # it from the disk cache. Time two on their own (their results are dropped: training
    # starts from `params`).
    first_calls = []
    for _ in range(2):
        before, start = train_step.cache_info(), time.perf_counter()
        train_step(params, state, x_train[:args.batch_size], onehot[:args.batch_size])
        seconds = time.perf_counter() - start
        first_calls.append((seconds, what_ran(before, train_step.cache_info())))

    step_times: list[float] = []
    progress = Progress(steps_per_epoch)
    for epoch in range(1, epochs + 1):
        order, total, epoch_start = rng.permutation(len(y_train)), 0.0, time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            t0 = time.perf_counter()
            params, state, value = train_step(params, state, x_train[idx], onehot[idx])
            step_times.append(time.perf_counter() - t0)
            total += float(value)
            rate = (step + 1) / (time.perf_counter() - epoch_start)
            progress.show(epoch, epochs, step + 1, total / (step + 1), None, rate)
        progress.show(epoch, epochs, steps_per_epoch, total / steps_per_epoch,
                      accuracy(params, x_test, y_test), rate, final=True)

    test_acc = accuracy(params, x_test, y_test)
    step_us = 1e6 * float(np.median(step_times))
    print(f"test accuracy: {test_acc:.4f}")
    for k, (seconds, how) in enumerate(first_calls, start=1):
        print(f"call {k} ({how}): {seconds:.2f} s")
    print(f"steady-state step (forward + reverse + Adam update in one call, median of "
          f"{len(step_times)}): {step_us:.0f} us = {1e6 / step_us:.0f} steps/s")
    calls = train_step.cache_info()
    print(f"cache_info: traces {calls['traces']}, interpreted {calls['interpreted']}, "
          f"compiles {calls['compiles']}, "
          f"disk loads {calls['disk_loads']}, hits {calls['hits']}")
    return test_acc


if __name__ == "__main__":
    main()
