"""Bad inputs found by a sweep of 145 of them (each called three times: the first call of a new
program and later ones, compiled and on the interpreter): each gives numpy's answer or a clear
error, a TapejitError that is also the built-in exception a numpy user expects, at the user's
line, naming what is wrong and the fix, on every call."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from test_errors import _line

HERE = "test_bad_inputs.py"


def _raises(exc_type, builtin, call, *fragments, line_of=None, calls=3):
    """`call()` raises, `calls` times: a TapejitError `exc_type` that is also `builtin`, whose
    message holds each fragment and points at the marked line of `line_of`."""
    for _ in range(calls):
        with pytest.raises(exc_type) as info:
            call()
        err = info.value
        assert isinstance(err, tj.TapejitError) and isinstance(err, builtin)
        for fragment in fragments:
            assert fragment in str(err), f"{fragment!r} not in:\n{err}"
        if line_of is not None:
            assert f"{HERE}:{_line(line_of)}" in str(err), str(err)
    return str(err)


@pytest.fixture(params=["interpret", "compile"])
def tier(request, monkeypatch):
    """Both first-call tiers: the first call of a new program on the interpreter (the default)
    or compiled."""
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", request.param)
    config.reload()
    yield request.param
    monkeypatch.undo()
    config.reload()


# --- 1. an argument assigned into, passed twice -------------------------------------------------
def _assigns_x(x, y):
    x[0] = 5.0
    return np.sum(x * y)


def test_an_argument_assigned_into_and_passed_twice_is_refused(tier):
    f = tj.jit(_assigns_x)
    a = np.array([1.0, 2.0, 3.0])
    assert f(a, a.copy()) == _assigns_x(a.copy(), a.copy())    # apart: numpy's answer (18)
    assert f(a, a.copy()) == 18.0                              # (later call)

    def same():
        return f(a, a)  # <- error
    _raises(tj.ArgumentError, ValueError, same, "assigns into argument x", "argument y",
            "same array", "a.copy()", line_of=same)

    def view():
        return f(a, a[::-1])  # <- error
    _raises(tj.ArgumentError, ValueError, view, "shares its memory", line_of=view)
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])          # never written (documented)
    # views that do not overlap are independent, as in numpy
    b = np.arange(6.0)
    assert f(b[:3], b[3:]) == _assigns_x(b.copy()[:3], b.copy()[3:])
    twice = tj.jit(_assigns_x)

    def first():
        return twice(a, a)  # <- error
    _raises(tj.ArgumentError, ValueError, first, "argument y", line_of=first)


def test_a_traced_value_passed_twice_to_a_function_that_assigns_into_it():
    inner = tj.jit(_assigns_x)

    def outer(x):
        return inner(x, x)  # <- error
    _raises(tj.ArgumentError, ValueError, lambda: tj.grad(outer)(np.ones(3)), "argument y",
            line_of=outer)


# --- 2. tracers leaked out of their trace ------------------------------------------------------
def test_a_leaked_tracer_used_after_its_trace_is_an_error():
    leak = []

    def f(x):
        leak.append(x * 2)  # <- made
        return np.sum(x)

    tj.grad(f)(np.ones(3))
    made = f"{HERE}:{_line(f, '# <- made')}"

    def add():
        return leak[0] + 1  # <- error

    def sin():
        return np.sin(leak[0])  # <- error

    def inside_jit():
        return tj.jit(lambda x: x + leak[0])(np.ones(3))  # <- error
    for use in (add, sin, inside_jit):
        message = _raises(tj.LeakedTracerError, RuntimeError, use, "after the trace",
                          "Return it from the function", line_of=use)
        assert made in message, message


def test_outer_tracers_in_inner_traces_and_tape_values_after_the_tape_still_work():
    def f(x):
        return np.sum(tj.grad(lambda y: np.sum(np.sin(x * y)))(x))   # x: the outer trace's
    x = np.array([0.5, 1.0])
    expected = np.sum(np.cos(x * x) * 2 * x)
    assert np.allclose(tj.grad(lambda x: f(x) + 0.0)(x).shape, (2,))
    assert np.isclose(tj.jit(f)(x), np.sum(np.cos(x * x) * x))
    assert np.isclose(np.sum(tj.grad(lambda y: np.sum(np.sin(y * y)))(x)), expected)
    v = tj.Variable(np.array([1.0, 2.0]))
    with tj.GradientTape() as tape:
        y = v * 3.0
        loss = np.sum(y)
    assert float(np.sum(y)) == 9.0                   # eager values stay readable
    np.testing.assert_array_equal(y + 1.0, [4.0, 7.0])
    np.testing.assert_array_equal(tape.gradient(loss, v), [3.0, 3.0])


# --- 3. einsum subscripts ---------------------------------------------------------------------
@pytest.mark.parametrize("spec, b_shape, fragment", [
    ("ij,jk->iq", (3, 4), "output subscript 'q' is in no input"),
    ("ij,jk->ii", (3, 4), "output subscript 'i' appears more than once"),
    ("ij,jk->ik", (4, 5), "subscript 'j' labels axes of sizes 3 and 4"),
    ("i1,jk->ik", (3, 4), "'1' is not a subscript"),
])
def test_einsum_with_bad_subscripts(spec, b_shape, fragment):
    def f(a, b):
        return np.einsum(spec, a, b)  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.jit(f)(np.ones((2, 3)), np.ones(b_shape)),
            fragment, spec, "(2, 3)", line_of=f)
    with pytest.raises(ValueError):
        np.einsum(spec, np.ones((2, 3)), np.ones(b_shape))     # numpy refuses it too


def test_einsum_sublist_with_a_bad_label():
    def f(a):
        return np.einsum(a, [0, 99])  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.jit(f)(np.ones((2, 2))), "not 99",
            line_of=f)


# --- 4, 8. constant indices out of bounds, float index arrays ----------------------------------
def _int5(x):
    return x[5]  # <- error


def _col7(x):
    return x[:, 7]  # <- error


def _list9(x):
    return x[[0, 9]]  # <- error


def _neg4(x):
    return x[-4]  # <- error


def _set5(x):
    y = x * 1.0
    y[5] = 0.0  # <- error
    return y


@pytest.mark.parametrize("fn, shape, index, axis", [
    (_int5, (3,), 5, 0), (_col7, (2, 3), 7, 1), (_list9, (3,), 9, 0), (_neg4, (3,), -4, 0),
    (_set5, (3,), 5, 0)])
def test_a_constant_index_out_of_bounds(fn, shape, index, axis):
    x = np.ones(shape)
    with pytest.raises(IndexError):
        fn(x)                                                   # numpy refuses it too
    _raises(tj.IndexingError, IndexError, lambda: tj.jit(fn)(x),
            f"index {index} is out of bounds for axis {axis} with size {shape[axis]}",
            f"valid indices are -{shape[axis]} to {shape[axis] - 1}", line_of=fn)


def _labels_too_short(logits, y):
    return -np.mean(logits[np.arange(logits.shape[0]), y])  # <- error


def test_index_arrays_that_do_not_broadcast():
    """numpy's IndexError (a bare ValueError from np.broadcast_shapes before)."""
    logits, y = np.zeros((5, 4)), np.array([0, 1, 2])
    with pytest.raises(IndexError):
        _labels_too_short(logits, y)
    _raises(tj.IndexingError, IndexError, lambda: tj.grad(_labels_too_short)(logits, y),
            "indexing arrays could not be broadcast together with shapes (5,) (3,)",
            line_of=_labels_too_short)


def test_too_many_indices_and_a_float_scalar_index():
    def f(x):
        return x[0, 1]  # <- error

    def g(x):
        return x[1.5]  # <- error
    _raises(tj.IndexingError, IndexError, lambda: tj.jit(f)(np.ones(3)), "too many indices",
            line_of=f)
    _raises(tj.IndexingError, IndexError, lambda: tj.jit(g)(np.ones(3)),
            "unsupported index 1.5", line_of=g)


def _rot_same_axes(x):
    return np.rot90(x, axes=(2, -1))  # <- error


def _rot_three_axes(x):
    return np.rot90(x, axes=(0, 1, 2))  # <- error


def _window_too_large(x):
    return np.lib.stride_tricks.sliding_window_view(x, 5, axis=0)  # <- error


def test_a_window_larger_than_the_array():
    with pytest.raises(ValueError):
        _window_too_large(np.ones((3, 4)))                      # numpy refuses it too
    _raises(tj.ShapeError, ValueError, lambda: tj.jit(_window_too_large)(np.ones((3, 4))),
            "window shape cannot be larger than input array shape", line_of=_window_too_large)


def _reshape_any_order(x):
    return x.reshape(3, 4, order="A")  # <- error


@pytest.mark.parametrize("fn, fragment", [
    (_rot_same_axes, "numpy.rot90: axes=(2, -1) must be two different axes"),
    (_rot_three_axes, "numpy.rot90: axes=(0, 1, 2) must be two axes")])
def test_rot90_with_bad_axes(fn, fragment):
    with pytest.raises(ValueError):
        fn(np.ones((2, 3, 2)))                                  # numpy refuses them too
    _raises(tj.ShapeError, ValueError, lambda: tj.jit(fn)(np.ones((2, 3, 2))), fragment,
            line_of=fn)


def test_reshape_in_memory_order_is_refused():
    """order='A' follows the array's memory layout, which a traced array does not have."""
    _raises(tj.UnsupportedOperationError, Exception,
            lambda: tj.jit(_reshape_any_order)(np.ones((2, 3, 2))),
            "reshape: order='A' depends on how the array is laid out",
            "pass order='C' or order='F'", line_of=_reshape_any_order)


def test_a_float_index_array():
    def traced(x, i):
        return x[i]  # <- error

    def constant(x):
        return x[np.array([0.0, 1.0])]  # <- error
    x = np.ones(3)
    for fn, call in ((traced, lambda: tj.jit(traced)(x, np.array([0.0, 1.0]))),
                     (constant, lambda: tj.jit(constant)(x))):
        _raises(tj.IndexingError, IndexError, call, "must be of integer type, not float64",
                "astype(np.int64)", line_of=fn)


def test_take_with_float_indices():
    def f(x, i):
        return np.take(x, i)  # <- error
    with pytest.raises(TypeError):
        np.take(np.ones(3), np.array([0.5]))                   # numpy: cannot cast safely
    for i in (np.array([0.5]), [0.5]):
        _raises(tj.DtypeError, TypeError, lambda: tj.jit(f)(np.ones(3), i), "integers",
                "float64", line_of=f)


# --- 5. ndarray.fill ---------------------------------------------------------------------------
def _filled(x):
    y = x * 2.0
    y[1:].fill(0.5)             # fills a view: writes through to y, as in numpy
    return np.sum(y * x)


def test_fill_is_an_index_assignment():
    x = np.array([1.0, 2.0, 3.0])
    f, g = tj.jit(_filled), tj.grad(_filled)
    for _ in range(3):
        assert np.isclose(f(x), _filled(x.copy()))
        np.testing.assert_allclose(g(x), [4.0, 0.5, 0.5])       # d(2 x0^2 + 0.5 x1 + 0.5 x2)


def test_ndarray_methods_and_attributes_tracers_lack():
    def put(x):
        y = x * 1.0
        y.put([0], [9.0])  # <- error
        return y

    def strides(x):
        return x.strides  # <- error
    for fn, name in ((put, "x.put"), (strides, "x.strides")):
        _raises(tj.UnsupportedAttributeError, AttributeError, lambda: tj.jit(fn)(np.ones(3)),
                name, "f64[3]", "x[idx] = v", line_of=fn)
        assert issubclass(tj.UnsupportedAttributeError, NotImplementedError)

    def probe(x):
        assert not hasattr(x, "strides") and not hasattr(x, "no_such_thing")
        return x.take([2, 0]) * 2.0                 # ndarray.take, as np.take
    np.testing.assert_array_equal(tj.jit(probe)(np.arange(3.0)), [4.0, 0.0])


# --- 6. transforms of something not callable ---------------------------------------------------
@pytest.mark.parametrize("name", ["grad", "value_and_grad", "jit", "jacobian", "jacrev", "jacfwd",
                                  "hessian", "vmap", "checkpoint", "custom_vjp"])
def test_a_transform_of_something_not_callable(name):
    def create():
        return getattr(tj, name)(3.0)  # <- error
    _raises(tj.NotCallableError, TypeError, create, f"tj.{name} expects a function", "float",
            "not the result of calling it", line_of=create, calls=1)
    assert issubclass(tj.NotCallableError, tj.ArgumentError)


@pytest.mark.parametrize("name, args", [("vjp", (np.ones(2),)),
                                        ("jvp", ((np.ones(2),), (np.ones(2),))),
                                        ("linearize", (np.ones(2),))])
def test_a_transform_called_on_something_not_callable(name, args):
    def call():
        return getattr(tj, name)(3.0, *args)  # <- error
    _raises(tj.NotCallableError, TypeError, call, f"tj.{name} expects a function",
            line_of=call)


def test_defvjp_with_something_not_callable():
    f = tj.custom_vjp(lambda x: x)

    def call():
        f.defvjp(lambda x: (x, None), "bwd")  # <- error
    _raises(tj.NotCallableError, TypeError, call, "defvjp (its bwd)", line_of=call, calls=1)


# --- 7. Python ints beyond int64 ---------------------------------------------------------------
def test_a_python_int_beyond_int64(tier):
    f = tj.jit(lambda x, n: x * n)
    x = np.ones(3)

    def huge():
        return f(x, 2**70)  # <- error
    _raises(tj.IntegerOverflowError, OverflowError, huge, "argument n", str(2**70),
            "beyond int64", "float(n)", line_of=huge)
    np.testing.assert_array_equal(f(x, 3), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(f(x, 3), [3.0, 3.0, 3.0])    # compiled, fast path
    _raises(tj.IntegerOverflowError, OverflowError, huge, "argument n", line_of=huge)
    _raises(tj.IntegerOverflowError, OverflowError, lambda: f(x, -2**63 - 1), "argument n")
    _raises(tj.IntegerOverflowError, OverflowError, lambda: f(x, {"k": 2**64}), "argument n_k")
    np.testing.assert_array_equal(f(x, 2**63 - 1), x * (2**63 - 1))   # the edge still fits
    np.testing.assert_array_equal(f(x, float(2**70)), x * 2.0**70)      # numpy's answer


# --- 9. argnums that pick nothing --------------------------------------------------------------
@pytest.mark.parametrize("make", [tj.grad, tj.value_and_grad, tj.jacobian, tj.jacrev, tj.jacfwd,
                                  tj.hessian])
@pytest.mark.parametrize("argnums", [(), [], "x", (0, 1.5), True])
def test_argnums_that_pick_nothing_fail_at_creation(make, argnums):
    def create():
        return make(lambda x: np.sum(x), argnums=argnums)  # <- error
    _raises(tj.ArgumentError, ValueError, create, f"argnums={argnums!r}", "non-empty tuple",
            line_of=create, calls=1)


# --- 10. pytree mismatches ---------------------------------------------------------------------
def test_tree_map_on_different_structures():
    def call():
        return tj.tree_map(lambda a, b: a + b, {"a": {"w": 1, "b": 2}}, {"a": {"w": 1}})  # <- error
    _raises(tj.ArgumentError, ValueError, call, "{'a': {'w': *}}", "{'a': {'b': *, 'w': *}}",
            "key 'b' at ['a'] is in the first tree but not in the other", line_of=call)

    def lengths():
        return tj.tree_map(lambda a, b: a, [1, 2], [1])  # <- error
    _raises(tj.ArgumentError, ValueError, lengths, "a list of 2 and the other a list of 1",
            line_of=lengths)


def test_optimizer_gradients_missing_a_parameter():
    opt = tj.optimizers.Adam(0.1)
    params = {"w": np.ones(2), "b": np.ones(1)}
    state = opt.init(params)

    def call():
        return opt.update({"w": np.ones(2)}, state, params)  # <- error
    _raises(tj.ArgumentError, ValueError, call, "Adam.update",
            "key 'b' at the top is in the parameters but not in the gradients", line_of=call)

    def apply():
        return tj.optimizers.apply_updates(params, {"w": np.ones(2)})  # <- error
    _raises(tj.ArgumentError, ValueError, apply, "key 'b'", line_of=apply)


def test_optimizer_settings_errors_name_the_line():
    def create():
        return tj.optimizers.SGD(0.1, nesterov=True)  # <- error
    _raises(tj.ArgumentError, ValueError, create, "nesterov=True needs a momentum",
            line_of=create, calls=1)

    def state():
        return tj.optimizers.Adam(0.1).update({"w": np.ones(2)}, None)  # <- error
    _raises(tj.ArgumentError, ValueError, state, "the state must be what", line_of=state,
            calls=1)


# --- 11. the gradient with respect to an int Variable ------------------------------------------
def test_the_gradient_of_an_int_variable_is_none_with_a_warning():
    n, w = tj.Variable(np.arange(3)), tj.Variable(np.ones(3))

    def gradient():
        with tj.GradientTape() as tape:
            y = np.sum(n * w * 2.0)
        return tape.gradient(y, [n, w])  # <- warning
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            grads = gradient()
        assert grads[0] is None
        np.testing.assert_array_equal(grads[1], [0.0, 2.0, 4.0])
        [warning] = [w for w in caught if issubclass(w.category, tj.TapejitWarning)]
        message = str(warning.message)
        assert "int64" in message and "float Variable" in message, message
        assert (warning.filename.endswith(HERE)
                and warning.lineno == _line(gradient, "# <- warning"))
