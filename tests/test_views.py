"""numpy's view semantics under tracing: assigning into a view writes through to its base (as
numpy does, and as autograd and JAX cannot), and a view read after its base was assigned into
shows the new values."""
import numpy as np
import tapejit as tj
from gradcheck import check_grads


def write_through(x):
    x = x * 1.0
    v = x[1:]
    v[0] = 7.0 * x[0]            # basic-index view
    r = x.reshape(2, 3)
    r += 1.0                     # reshape view, in-place operator
    t = r.T
    t[0] *= 2.0                  # view of a view
    v[-1] = v[-2] ** 2           # the first view still sees (and writes) x
    return np.sum(x ** 2) + np.sum(np.sin(v))


def test_writes_through_views_like_numpy():
    x = np.linspace(0.1, 0.6, 6)
    value, grad = tj.value_and_grad(write_through)(x)
    np.testing.assert_allclose(value, write_through(x), rtol=1e-14)
    check_grads(write_through, [x])


def test_in_place_operator_on_a_slice_view():
    def f(x):
        y = x + 0.0
        y[1:] += y[:-1]          # numpy evaluates the right side first
        return np.sum(y * y)
    x = np.arange(1.0, 5.0)
    np.testing.assert_allclose(tj.value_and_grad(f)(x)[0], f(x))
    check_grads(f, [x])


def test_a_copy_is_not_a_view():
    def f(x):
        y = x + 0.0
        c = y[1:].copy()
        c[0] = 100.0
        flat = y.reshape(2, 2).flatten()
        flat[0] = 100.0
        return np.sum(y)
    assert tj.value_and_grad(f)(np.ones(4))[0] == 4.0


def test_a_view_sees_later_assignments_to_its_base():
    def f(x):
        y = x + 0.0
        v = y[1:]
        w = y.reshape(2, 2).T
        y[1] = 5.0 * x[0]
        y[3] += x[2]
        return np.sum(v * v) + np.sum(w * np.arange(4.0).reshape(2, 2))
    x = np.array([0.3, 0.7, 1.1, 1.9])
    np.testing.assert_allclose(tj.value_and_grad(f)(x)[0], f(x), rtol=1e-14)
    check_grads(f, [x])


def test_scalar_indexing_returns_a_copy():
    def f(x):
        y = x + 0.0
        a = y[0]
        y[0] = 5.0
        return a + np.sum(y)
    assert tj.value_and_grad(f)(np.ones(3))[0] == f(np.ones(3))


def test_views_stay_views_after_repeated_assignments():
    def f(x):
        y = x + 0.0
        v = y[1:]
        w = v[::-1]
        for k in range(3):
            y[k] = y[k + 1] * 2.0      # each assignment reaches v and w
            v[0] += w[0]               # and each write through v reaches y
        return np.sum(w * np.arange(1.0, 4.0)) + np.sum(y)
    x = np.array([0.3, 0.7, 1.1, 1.9])
    np.testing.assert_allclose(tj.value_and_grad(f)(x)[0], f(x), rtol=1e-14)
    check_grads(f, [x])
