"""Error messages as a user meets them: each names the operation, the shapes/dtypes involved and
the user's source line, says what to do instead, and is catchable both as a TapejitError and as
the built-in exception a numpy user would expect."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import tapejit as tj
from tapejit import config

HERE = "test_errors.py"


def _line(fn, marker: str = "# <- error") -> int:
    """The line number of the line of `fn`'s source that holds `marker`."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + k for k, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, hits
    return hits[0]


def _raises(exc_type, builtin, call, *fragments, line_of=None):
    """Run `call`; check the error's types, that the message holds each fragment, and that it
    points at the marked line of `line_of`."""
    with pytest.raises(exc_type) as info:
        call()
    err = info.value
    assert isinstance(err, tj.TapejitError) and isinstance(err, builtin)
    message = str(err)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    if line_of is not None:
        assert f"{HERE}:{_line(line_of)}" in message, message
    return message


# --- grad's contract --------------------------------------------------------------------------
def test_non_scalar_output():
    def f(x):
        return np.sin(x) * 2.0  # <- error
    _raises(tj.ArgumentError, ValueError, lambda: tj.grad(f)(np.ones(3)),
            "scalar output", "f64[3]", "np.sum", "tj.vjp", line_of=f)


@pytest.mark.parametrize("value, dtype", [(np.arange(3), "int64"), (np.ones(2, bool), "bool"),
                                          (3, "int64")])
def test_differentiating_int_or_bool(value, dtype):
    def f(x):
        return np.sum(x * 2.0)

    def call():
        return tj.grad(f)(value)  # <- error
    _raises(tj.DtypeError, TypeError, call, "argument x", dtype, "floating-point",
            "argnums", line_of=call)


def test_argnums_out_of_range():
    def call():
        return tj.grad(lambda x, y: x * y, argnums=2)(1.0, 2.0)  # <- error
    _raises(tj.ArgumentError, ValueError, call, "argnums 2 is out of range",
            "2 positional argument", line_of=call)
    _raises(tj.ArgumentError, ValueError,
            lambda: tj.grad(lambda x: x, argnums=(0, -2))(1.0), "argnums -2")


def test_function_returning_none():
    def forgot_return(x):  # <- error
        np.sum(x)
    _raises(tj.ArgumentError, ValueError, lambda: tj.grad(forgot_return)(np.ones(2)),
            "forgot_return returned None", "return", line_of=forgot_return)


def test_function_returning_string():
    def stringy(x):  # <- error
        return "loss"
    _raises(tj.ArgumentError, ValueError, lambda: tj.grad(stringy)(np.ones(2)),
            "stringy returned a str", "arrays, numbers", line_of=stringy)


def test_has_aux_without_pair():
    def no_aux(x):  # <- error
        return np.sum(x)
    _raises(tj.ArgumentError, ValueError, lambda: tj.grad(no_aux, has_aux=True)(np.ones(2)),
            "has_aux=True", "pair (output, aux)", line_of=no_aux)


def test_non_array_argument():
    def call():
        return tj.grad(lambda x, s: x)(1.0, "text")  # <- error
    _raises(tj.ArgumentError, ValueError, call, "argument s is a str", "static_argnums",
            line_of=call)


# --- numpy functions tapejit does not support -------------------------------------------------
@pytest.mark.parametrize("name", ["linalg.eig", "histogram"])
def test_unsupported_numpy_function(name):
    fn = np.linalg.eig if name == "linalg.eig" else np.histogram

    def f(x):
        return np.sum(fn(x))  # <- error
    message = _raises(tj.UnsupportedOperationError, NotImplementedError,
                      lambda: tj.grad(f)(np.eye(2) * 2.0), f"numpy.{name}", "not supported",
                      "Supported:", "concatenate", "einsum", line_of=f)
    assert f"{name.split('.')[-1]}," not in message.split("Supported:")[1]


def test_ufunc_where_without_out_and_two_outs():
    """where= without out= leaves numpy's unselected elements uninitialized; out= of a ufunc
    of two results is not written either."""
    def f(x):
        return np.sum(np.exp(x, where=x > 0))  # <- error

    def g(x):
        q, r = x * 1.0, x * 1.0
        np.divmod(x, 2.0, out=(q, r))  # <- error
        return np.sum(q + r)
    for fn, name in ((f, "numpy.exp"), (g, "numpy.divmod")):
        _raises(tj.UnsupportedOperationError, NotImplementedError,
                lambda: tj.grad(fn)(np.ones(3)), name, "where=", line_of=fn)


def test_augmented_assignment_into_numpy_array():
    """Into an array made outside the function (a constructor's array made inside is a
    buffer, and out= into a traced array a write: test_buffers.py)."""
    def f(x, acc=np.zeros(3)):
        acc += x  # <- error
        return np.sum(acc)
    _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(f)(np.ones(3)),
            "written in place into an array made outside", "acc = acc + x", line_of=f)


def test_traced_boolean_mask():
    def f(x):
        return np.sum(x[x > 0])  # <- error
    _raises(tj.UnsupportedOperationError, NotImplementedError,
            lambda: tj.grad(f)(np.array([1.0, -1.0])), "boolean mask", "np.where", line_of=f)


# --- concretization ---------------------------------------------------------------------------
def _branch(x):
    if x > 0:  # <- error
        return x
    return -x


def _to_float(x):
    return float(x) * x  # <- error


def _to_int(x):
    return x * int(x)  # <- error


def _to_bool(x):
    return x * bool(x)  # <- error


@pytest.mark.parametrize("fn, what, aval", [
    (_branch, "bool()", "bool[]"), (_to_float, "float()", "f64[]"),
    (_to_int, "int()", "f64[]"), (_to_bool, "bool()", "f64[]")],
    ids=["if", "float", "int", "bool"])
def test_concretization_under_strict_mode(fn, what, aval, monkeypatch):
    """JAX's rule (TAPEJIT_STRICT=1): no Python branching on traced values (by default the
    value is computed and guarded: tests/test_guards.py)."""
    monkeypatch.setenv("TAPEJIT_STRICT", "1")
    config.reload()
    try:
        _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(fn)(2.0), what, aval,
                "TAPEJIT_STRICT=1", "np.where", "tj.cond", line_of=fn)
    finally:
        monkeypatch.delenv("TAPEJIT_STRICT")
        config.reload()


def test_a_traced_float_as_a_number():
    _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(_to_float)(2.0), "float()",
            "drop its derivative", line_of=_to_float)


def _math_exp(x):
    return math.exp(x[0]) * x  # <- error


def test_a_math_function_on_a_traced_value_says_which_numpy_function_traces():
    message = _raises(tj.ConcretizationError, TypeError,
                      lambda: tj.jacobian(_math_exp)(np.ones(2)), "float()",
                      "`math.exp` works on Python floats only", "write `np.exp(...)`",
                      line_of=_math_exp)
    assert "math.gamma" not in message
    lgamma = _raises(tj.ConcretizationError, TypeError,
                     lambda: tj.grad(lambda x: math.lgamma(x))(2.0), "scipy.special.gammaln")
    assert "np.lgamma" not in lgamma
    plain = _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(_to_float)(2.0),
                    "float()")
    assert "math." not in plain


def test_an_unsupported_scipy_ufunc_is_named_as_scipy_names_it():
    special = pytest.importorskip("scipy.special")
    _raises(tj.UnsupportedOperationError, NotImplementedError,
            lambda: tj.grad(lambda x: np.sum(special.j0(x)))(np.ones(3)),
            "scipy.special.j0 is not supported on traced arrays")


def _convolved(x):
    import scipy.signal
    return np.sum(scipy.signal.convolve(x, x))  # <- error


def test_a_library_function_that_cannot_be_traced_is_named_at_the_users_line():
    pytest.importorskip("scipy.signal")
    message = _raises(tj.ConcretizationError, TypeError,
                      lambda: tj.grad(_convolved)(np.ones(3)),
                      "scipy.signal.convolve cannot be traced: Converting to a numpy array",
                      "(f64[3])", "write what it computes with numpy functions",
                      line_of=_convolved)
    assert message.splitlines()[-1] == f"  at {__file__}:{_line(_convolved)}", message


def _skew(x):
    from scipy.stats import skew
    return skew(x)  # <- error


def test_a_decorated_library_function_is_named_as_the_user_calls_it():
    """scipy.stats.skew runs in a decorator's wrapper (axis_nan_policy_wrapper): the error
    names the function the user's line calls, by the name it is published under."""
    pytest.importorskip("scipy.stats")
    import scipy.stats as st
    for fn in (_skew, lambda x: st.skew(x)):
        message = _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(fn)(np.ones(3)),
                          "scipy.stats.skew cannot be traced", "(f64[3])")
        assert "wrapper" not in message, message
    _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(_skew)(np.ones(3)),
            line_of=_skew)


def _max_where(x):
    return np.max(x, where=x > 1)  # <- error


def test_a_masked_maximum_without_initial_is_a_tapejit_error():
    _raises(tj.ArgumentError, ValueError, lambda: tj.jit(_max_where)(np.ones(3)),
            "numpy.max: a where= mask needs initial=", line_of=_max_where)


def test_assign_traced_into_an_array_made_outside():
    def f(x, out=np.zeros(3)):
        out[0] = x[1]  # <- error
        return np.sum(out)
    _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(f)(np.ones(3)),
            "not into an array made outside it", line_of=f)


def test_assign_traced_slice_into_an_array_made_outside():
    buffer = np.zeros(3)

    def f(x):
        buffer[:2] = x[1:]  # <- error
        return np.sum(buffer)
    _raises(tj.ConcretizationError, TypeError, lambda: tj.grad(f)(np.ones(3)),
            "made inside the function", "f64[2]", line_of=f)


# --- shapes -----------------------------------------------------------------------------------
def test_broadcast_mismatch():
    def f(x, y):
        return np.sum(x + y)  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.grad(f)(np.ones(3), np.ones(4)),
            "add", "(3,)", "(4,)", line_of=f)


def test_matmul_mismatch():
    def f(a, b):
        return np.sum(a @ b)  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.grad(f)(np.ones((2, 3)), np.ones((4, 2))),
            "(2, 3)", "(4, 2)", line_of=f)


def test_reshape_mismatch():
    def f(x):
        return np.sum(x.reshape(2, 2))  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.grad(f)(np.ones(3)), "reshape", "f64[3]",
            "(2, 2)", line_of=f)


def test_axis_out_of_range():
    def f(x):
        return np.sum(np.sum(x, axis=2))  # <- error
    _raises(tj.ShapeError, ValueError, lambda: tj.grad(f)(np.ones(3)), "axis 2",
            line_of=f)


def test_errors_inside_nested_grad_point_at_user_line():
    def inner(x):
        return np.sum(x + np.ones(4))  # <- error

    def outer(x):
        return np.sum(tj.grad(inner)(x))
    _raises(tj.ShapeError, ValueError, lambda: tj.grad(outer)(np.ones(3)), "(3,)", "(4,)",
            line_of=inner)


def test_error_leaves_no_open_trace():
    with pytest.raises(tj.ShapeError):
        tj.grad(lambda x: np.sum(x + np.ones(4)))(np.ones(3))
    np.testing.assert_allclose(tj.grad(lambda x: np.sum(x * x))(np.ones(2)), [2.0, 2.0])
