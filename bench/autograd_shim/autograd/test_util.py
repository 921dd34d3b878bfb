"""autograd.test_util.check_grads: the reverse-mode gradient against central differences,
along one random direction (as autograd's check does)."""
import numpy as np

import tapejit as tj


def check_grads(fun, modes=("rev",), order=2, eps=1e-6, rtol=1e-6):
    def check(x):
        x = np.asarray(x, dtype=float)
        v = np.random.RandomState(0).randn(*x.shape)
        exact = np.sum(tj.grad(fun)(x) * v)
        numeric = (fun(x + v * eps / 2) - fun(x - v * eps / 2)) / eps
        assert abs(exact - numeric) <= 1e-6 + rtol * abs(exact + numeric), (exact, numeric)
    return check
