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
