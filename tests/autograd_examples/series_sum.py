"""A tiny program written the way HIPS autograd's examples are (for the runner's smoke test):
a series truncated when its term is small (a Python `while` on a traced value), its
derivatives by grad and elementwise_grad, and a value_and_grad fed to scipy's minimize."""
from scipy.optimize import minimize

import autograd.numpy as np
from autograd import elementwise_grad, grad, value_and_grad


def exp_series(x):
    total, term, n = 1.0, 1.0, 1
    while np.abs(term) > 1e-12 * np.abs(total):
        term = term * x / n
        total = total + term
        n += 1
    return total


print(grad(exp_series)(1.5), np.exp(1.5))
print(elementwise_grad(np.tanh)(np.linspace(-1.0, 1.0, 5)))

loss = lambda p: np.sum((exp_series(p[0]) - 3.0) ** 2 + (p[1] - 0.5) ** 2)
result = minimize(value_and_grad(loss), np.array([0.1, 0.1]), jac=True, method="BFGS")
print(result.x)
