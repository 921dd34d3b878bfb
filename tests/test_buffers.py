"""Buffers made by numpy constructors inside a traced function and filled with traced values
(`out = np.zeros(n); out[i] = traced`, issue 35): the trace starts again with that line's
constructor making traced arrays (recording.BufferWrite, trace_to_tape). Compiled (conftest: first
and later calls, verified against the interpreter) and checked against numpy and finite
differences; how often the function runs; arrays made outside the function and GradientTape's
one-pass recording keep a clear error."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

from gradcheck import check_grads


def counted(fn):
    def wrapper(*args):
        wrapper.runs += 1
        return fn(*args)
    wrapper.runs = 0
    return wrapper


def fill(x):
    out = np.zeros(3)
    for i in range(3):
        out[i] = x[i] ** 2
    return np.sum(out * x)


def test_a_filled_buffer_is_traced_once_more_and_then_cached():
    f = counted(fill)
    g = tj.grad(f)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(g(x), 3 * x ** 2)
    assert f.runs == 2                  # the first write stops the first trace
    np.testing.assert_allclose(g(x + 1), 3 * (x + 1) ** 2)
    assert f.runs == 2 and g.cache_info()["traces"] == 1
    np.testing.assert_allclose(tj.jit(fill)(x), fill(x))
    check_grads(fill, [x])


def test_rows_slices_and_empty_on_square_shapes():
    def f(x):
        out = np.empty((3, 3))         # traced as zeros: no unspecified values in the program
        out[0] = np.sin(x)
        out[1, :] = x * 2
        out[2, 1:] = x[:2]
        out[2, 0] = 1.0
        return np.sum(out ** 2) + np.sum(out @ out)
    x = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(tj.jit(f)(x), f(x))
    check_grads(f, [x])


def test_a_buffer_made_and_filled_on_one_line():
    """tapejit's own arrays made while it assigns (setitem's mask) are not the line's buffers:
    it recursed until Python's limit when the buffer's line also held the write; nor numpy's."""
    def f(x):
        out = np.zeros((2, 3)); out[0] = x; out[1, 1:] = x[:2] * 2; return np.sum(out ** 2)  # noqa: E702
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(tj.jit(f)(x), f(x))
    np.testing.assert_allclose(tj.grad(f)(x), 2 * x + 8 * np.append(x[:2], 0.0))
    check_grads(f, [x])
    # numpy's own scratch arrays neither (broadcast_shapes' np.empty, of a dtype tapejit has
    # not: "TypeError: tapejit does not support dtype []"), written through index arrays
    def diagonal(x):
        m = np.ones((3, 3)); m[np.diag_indices(3)] = x; return np.sum(m ** 2)  # noqa: E702
    np.testing.assert_allclose(tj.jit(diagonal)(x), diagonal(x))
    np.testing.assert_allclose(tj.grad(diagonal)(x), 2 * x)
    check_grads(diagonal, [x])


def test_augmented_writes_and_repeated_indices():
    def f(x):
        out = np.ones(4)
        for i in (0, 2, 0, 3):
            out[i] += x[i] * out[i]
        return np.sum(np.log(out ** 2))
    x = np.array([0.5, 1.5, -0.25, 2.0])
    np.testing.assert_allclose(tj.jit(f)(x), f(x))
    check_grads(f, [x])


def test_a_traced_index_writes_a_traced_buffer():
    def f(x, idx):
        out = np.full(5, 2.0)
        out[idx] = x
        return np.sum(out * np.arange(5.0))
    x, idx = np.array([1.5, -2.0]), np.array([4, 1])
    np.testing.assert_allclose(tj.jit(f)(x, idx), f(x, idx))
    check_grads(lambda x: f(x, idx), [x])


def test_repeated_traced_indices_keep_the_last_value_as_numpy():
    """`y[idx] = v` with traced indices that repeat (also as a negative index and its positive
    twin): numpy keeps the last write (tapejit summed them, a silent wrong result); only the
    kept values get a gradient; square shapes, a 2-d key."""
    def f(x, idx, v):
        y = x * 1.0
        y[idx] = v
        return y
    x, v = np.zeros(4), np.array([10.0, 20.0, 30.0, 40.0])
    weights = np.arange(1.0, 5.0)
    for idx in (np.array([1, 1, 3, 1]), np.array([3, 2, 1, 3]), np.array([-1, 3, 2, 2]),
                np.array([0, 1, 2, 3])):
        for _ in range(2):
            np.testing.assert_array_equal(tj.jit(f)(x, idx, v), f(x, idx, v))
        kept = [k for k in range(4) if not any((idx[j] - idx[k]) % 4 == 0
                                               for j in range(k + 1, 4))]
        grad = tj.grad(lambda v, x: np.sum(f(x, idx, v) * weights))(v, x)
        np.testing.assert_array_equal(grad, [weights[idx[k]] if k in kept else 0.0
                                             for k in range(4)])

    def g(a, r, c):
        b = a * 1.0
        b[r, c] = a[0, 0] * np.arange(1.0, 5.0)
        return b
    a, r, c = np.ones((3, 3)), np.array([0, 2, 0, 2]), np.array([1, 1, 1, 0])
    for _ in range(2):
        np.testing.assert_array_equal(tj.jit(g)(a, r, c), g(a, r, c))


def test_in_place_ufuncs_and_flat_writes_into_buffers():
    """`buf[idx] += traced` (numpy: a repeated index written once), `buf += traced`,
    np.add.at into a constructor's array, np.fill_diagonal (matrix, tall with wrap, cube),
    `x.flat[k] = v` and `x.flat = v`: numpy's results, compiled, and their gradients."""
    def f(x):
        out = np.zeros(3)
        out[[0, 0, 2]] += x
        acc = np.zeros(3)
        np.add.at(acc, [0, 0, 2], x)
        whole = np.ones(3)
        whole *= x
        return out, acc, whole

    def diagonals(x):
        m, tall, cube = np.zeros((3, 3)), np.zeros((5, 2)), np.zeros((2, 2, 2))
        np.fill_diagonal(m, x)
        np.fill_diagonal(tall, x[:2], wrap=True)
        np.fill_diagonal(cube, x[2])
        flat = x * 1.0
        flat.flat[::2] = -x[1]
        filled = np.zeros(4)
        filled.flat = x[:2]
        return m, tall, cube, flat, filled
    x = np.array([1.5, -2.0, 3.0])
    for fn in (f, diagonals):
        for _ in range(2):
            for got, want in zip(tj.jit(fn)(x), fn(x), strict=True):
                np.testing.assert_array_equal(got, want)
        check_grads(lambda x: sum(np.sum(np.sin(o) * (k + 1)) for k, o in enumerate(fn(x))),
                    [x])


def test_updates_through_one_traced_mask():
    """`x[m] *= 0.01`, `x[m] += 1` then `x[m] = x[m] ** 2`, `x[m] = y[m]`, `x[m] -= row`,
    `x[m] = 2 / x[m]`: numpy's results (x[m] only to be written back; its other uses are the
    boolean-mask error); gradients against finite differences."""
    def f(x, y):
        a = x * 1.0
        a[a < 0] *= 0.01
        b, m = x * 1.0, x > 0
        b[m] += 1
        b[m] = b[m] ** 2
        c, neg = x * 1.0, x < 0
        c[neg] = y[neg]
        d = x * 1.0
        d[d[:, 0] > 0] -= np.array([1.0, 2.0, 3.0])
        e, pos = x * 1.0, x > 0
        e[pos] = 2.0 / e[pos]
        return a, b, c, d, e
    x = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0], [7.0, -8.0, 9.0]])
    y = x * 10
    for _ in range(2):
        for got, want in zip(tj.jit(f)(x, y), f(x, y), strict=True):
            np.testing.assert_array_equal(got, want)
    check_grads(lambda x, y: sum(np.sum(np.sin(o)) for o in f(x, y)), [x, y], (0, 1))
    for misuse in (lambda x: np.sum(x[x > 0]), lambda x: x[x > 0].shape,
                   lambda x: len(x[x > 0])):
        with pytest.raises(tj.UnsupportedOperationError, match="traced boolean mask"):
            tj.jit(misuse)(x)


def test_out_into_traced_arrays_is_a_write():
    """np.multiply(y, v, out=y), out= with where=, a positional out, and numpy's same_kind
    refusal of a float result into an int buffer (a constructor's int array)."""
    def f(x, v):
        y = x * 1.0
        np.multiply(y, v, out=y)
        np.add(y, 1.0, out=y, where=x > 0)
        z = np.exp(x)
        np.sqrt(z, z)
        return y, z
    x, v = np.array([1.0, -2.0, 3.0]), np.array([2.0, 3.0, 4.0])
    for _ in range(2):
        for got, want in zip(tj.jit(f)(x, v), f(x, v), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-15)
    check_grads(lambda x, v: np.sum(np.sin(f(x, v)[0]) + f(x, v)[1]), [x, v], (0, 1))

    def into_ints(x):
        k = np.arange(3)
        np.add(k, x, out=k)
        return k
    with pytest.raises(tj.DtypeError, match="cannot be written into the int64 out="):
        tj.jit(into_ints)(x)


def test_a_traced_mask_assigns_one_value_to_every_selected_element():
    """`y[y < 0] = 0`, a row per selected row, a traced scalar, ints and NaN: np.where, as
    numpy computes it; one value per selected element is a clear error (their count is a
    value of the call), and so is a mask of the wrong shape."""
    def f(x):
        y = x * 1.0
        y[y < 0] = 0.0
        rows = x * 1.0
        rows[x[:, 0] > 0] = np.array([10.0, 20.0, 30.0])
        same = x * 1.0
        same[x > 2] = x[0, 0]
        ints = x.astype(np.int64)
        ints[x < 0] = -1
        return y, rows, same, ints
    x = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0], [7.0, 8.0, -9.0]])
    for _ in range(2):
        for got, want in zip(tj.jit(f)(x), f(x), strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    check_grads(lambda x: sum(np.sum(o ** 2) for o in f(x)[:3]), [x])

    def per_element(x):
        y = x * 1.0
        y[x > 0] = np.arange(3.0)
        return y
    with pytest.raises(tj.UnsupportedOperationError, match="one value per selected element"):
        tj.jit(per_element)(x)

    def wrong_shape(x):
        y = x[:2] * 1.0
        y[x[0] > 0] = 1.0
        return y
    with pytest.raises(tj.IndexingError, match=r"boolean index of shape \(3,\)"):
        tj.jit(wrong_shape)(x)


def test_an_int_buffer_of_traced_indices_gathers():
    def f(x, k):
        idx = np.zeros(2, dtype=np.int64)
        idx[0] = k
        idx[1] = k + 1
        return np.sum(x[idx] ** 2)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    for k in (0, 2):
        np.testing.assert_allclose(tj.jit(f)(x, np.int64(k)), f(x, k))
        np.testing.assert_allclose(tj.grad(f)(x, np.int64(k)),
                                   [2 * x[i] if i in (k, k + 1) else 0.0 for i in range(4)])


def test_a_write_through_a_view_of_the_buffer():
    def f(x):
        out = np.zeros((2, 3))
        row = out[1]                    # a view, made before the traced write
        row[:] = x
        return np.sum(out * np.array([[1.0], [2.0]]) * x)
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(tj.jit(f)(x), f(x))
    check_grads(f, [x])


def test_two_buffer_lines_trace_three_times():
    def two(x):
        a = np.zeros(2)
        b = np.zeros(2)
        a[0] = x[0]
        b[1] = x[1] * a[0]
        return np.sum(a + b)
    f = counted(two)
    x = np.array([2.0, 3.0])
    np.testing.assert_allclose(tj.grad(f)(x), [1.0 + x[1], x[0]])
    assert f.runs == 3


def test_a_buffer_in_a_loop_body_and_a_size_zero_buffer():
    def body(i, carry):
        step = np.zeros(2)
        step[0] = carry[1]
        step[1] = -carry[0]
        return carry + 0.1 * step
    def f(x):
        empty = np.zeros(0)
        empty[:] = x[:0]
        return np.sum(tj.fori_loop(0, 5, body, x) ** 2) + np.sum(empty)
    def reference(x):
        for i in range(5):
            x = body(i, x)
        return np.sum(x ** 2)
    x = np.array([1.0, 0.5])
    np.testing.assert_allclose(tj.jit(f)(x), reference(x))
    check_grads(f, [x])


def test_a_buffer_never_written_with_traced_values_stays_a_constant():
    def f(x):
        weights = np.zeros(3)
        weights[1] = 2.0                # a number: the array stays numpy's
        return np.sum(weights * x)
    g = counted(f)
    np.testing.assert_allclose(tj.grad(g)(np.ones(3)), [0.0, 2.0, 0.0])
    assert g.runs == 1


OUTSIDE = np.zeros(3)


def test_an_array_made_outside_the_function_is_an_error():
    def f(x):
        OUTSIDE[0] = x[0]
        return np.sum(OUTSIDE)
    with pytest.raises(tj.ConcretizationError, match="not into an array made outside it"):
        tj.grad(f)(np.ones(3))


def test_gradient_tape_refuses_to_lose_the_write():
    x = tj.Variable(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(tj.ConcretizationError, match=r"np.zeros_like\(x\)") as err:
        with tj.GradientTape():
            out = np.zeros(3)
            out[0] = x[0] * 2
    assert "test_buffers.py" in str(err.value)
    with tj.GradientTape() as tape:     # the fix the message gives
        out = np.zeros_like(x)
        out[0] = x[0] * 2
        y = np.sum(out * x)
    np.testing.assert_allclose(tape.gradient(y, x), [4.0, 0.0, 0.0])
