"""scipy.optimize.minimize with exact gradients from tapejit (`jac=True`).

`tj.value_and_grad(f)` returns `(f(x), df/dx)`, exactly what `scipy.optimize.minimize(fun,
x0, jac=True)` asks for, so any numpy objective gets an exact gradient for free:

1. the Rosenbrock function in 20 dimensions (minimum 0 at x = 1), with L-BFGS-B: exact
   gradients against scipy's finite differences (which cost n + 1 evaluations per gradient);
2. an L2-regularised logistic regression on scikit-learn's breast-cancer data (569 samples,
   30 features; no download), with L-BFGS-B, compared with sklearn's LogisticRegression.

    python examples/scipy_minimize.py            # needs scipy (and scikit-learn for part 2)
    python examples/scipy_minimize.py --quick    # the smoke test: smaller problems
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import minimize

import tapejit as tj

TOL = {"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10}

def rosenbrock(x: np.ndarray) -> np.ndarray:
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def logistic_loss(w: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Mean binary cross-entropy of sigmoid(x @ w[1:] + w[0]) with labels y in {0, 1}, plus
    l2/2 |w[1:]|^2; written with logaddexp, so it stays finite for large logits."""
    z = x @ w[1:] + w[0]
    return np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * np.sum(w[1:] ** 2)


def fit_rosenbrock(n: int) -> None:
    x0 = np.full(n, -1.2)
    fun = tj.value_and_grad(rosenbrock)
    t0 = time.perf_counter()
    fun(x0)                                 # the first call traces and compiles (or loads)
    print(f"  first call of value_and_grad: {time.perf_counter() - t0:.2f} s")
    for label, kwargs in (("tapejit value_and_grad", {"fun": fun, "jac": True}),
                          ("finite differences", {"fun": rosenbrock})):
        t0 = time.perf_counter()
        res = minimize(x0=x0, method="L-BFGS-B", options=TOL, **kwargs)
        dt = time.perf_counter() - t0
        print(f"  {label:24s} f = {res.fun:.2e}  |x - 1|max = {np.max(np.abs(res.x - 1)):.1e}"
              f"  {res.nit:4d} iterations, {res.nfev:5d} evaluations, {1e3 * dt:.1f} ms")


def fit_logistic(quick: bool) -> None:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    data = load_breast_cancer()
    x = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    y = data.target.astype(float)
    n_train = 100 if quick else 450
    l2 = 1e-2
    fun = tj.value_and_grad(logistic_loss)
    res = minimize(fun, np.zeros(x.shape[1] + 1), args=(x[:n_train], y[:n_train], l2),
                   jac=True, method="L-BFGS-B", options=TOL)
    w = res.x
    test_acc = np.mean(((x[n_train:] @ w[1:] + w[0]) > 0) == y[n_train:])
    # the same objective in sklearn: C = 1 / (n * l2) for a mean loss
    ref = LogisticRegression(C=1.0 / (n_train * l2), tol=1e-10, max_iter=10000)
    ref.fit(x[:n_train], y[:n_train])
    diff = np.max(np.abs(w[1:] - ref.coef_[0]))
    print(f"  L-BFGS-B: loss {res.fun:.5f} in {res.nit} iterations; test accuracy "
          f"{test_acc:.3f} on {len(y) - n_train} held-out samples")
    print(f"  max |w - sklearn LogisticRegression's w| = {diff:.1e}")
    assert diff < 1e-4, "the fit disagrees with scikit-learn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller problems")
    args = parser.parse_args()
    n = 5 if args.quick else 20
    print(f"Rosenbrock, n = {n}, from x0 = -1.2:")
    fit_rosenbrock(n)
    print("logistic regression, breast-cancer data:")
    fit_logistic(args.quick)


if __name__ == "__main__":
    main()
