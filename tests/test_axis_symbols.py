"""Issue 17's compiled-code repros: axes of equal length that are different axes.

Sizes are symbols tied to axes (dims.py): every program here has two axes of the same length
that nothing ties, and must give numpy's answer compiled, on every call. The suite's conftest
compiles from the first call and checks each compiled call against the interpreter."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads
from tapejit.dims import Dims
from tapejit.ir import Tape

RNG = np.random.default_rng(17)


def _calls(fn, *args, n: int = 3) -> list:
    return [fn(*args) for _ in range(n)]


def _close(got, want) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


PROGRAMS = {
    # a (3,) vector times a (3, 1) column: the vector runs along the inner axis
    "column_times_sin": (lambda a, b: b * np.sin(a),
                         lambda: (np.array([1.0, 2.0, 3.0]), np.array([[1.0], [2.0], [3.0]]))),
    "outer_sin": (lambda x: np.outer(x, np.sin(x)), lambda: (RNG.normal(size=3),)),
    # 3 bodies in 3-D: q[None, :, None] must not be read as q[:, None, None]
    "nbody_3x3": (lambda p, q: np.sum(q[None, :, None] * (p[None] - p[:, None]), axis=1),
                  lambda: (RNG.normal(size=(3, 3)), RNG.normal(size=3))),
    "rbf_n_equals_dim": (
        lambda x, w: (np.exp(-np.sum((x[:, None] - x[None]) ** 2, axis=-1))
                      * w[None, :] * w[:, None]),
        lambda: (RNG.normal(size=(3, 3)), RNG.normal(size=3))),
    "row_plus_column_square": (lambda m, v: m + v + v[:, None] * np.tanh(m.T),
                               lambda: (RNG.normal(size=(4, 4)), RNG.normal(size=4))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_on_every_call(name: str) -> None:
    fn, make = PROGRAMS[name]
    args = make()
    for got in _calls(tj.jit(fn), *args):
        _close(got, fn(*args))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradients_on_every_call(name: str) -> None:
    fn, make = PROGRAMS[name]
    args = make()
    loss = lambda *a: np.sum(np.sin(fn(*a)))  # noqa: E731
    argnums = tuple(range(len(args)))
    want = tj.grad(loss, argnums, backend="interpret")(*args)
    for got in _calls(tj.grad(loss, argnums), *args):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    check_grads(loss, args, argnums, rtol=1e-5, atol=1e-7)


def _mlp(p, x, y):
    h = np.tanh(x @ p["w1"] + p["b1"])
    h = np.tanh(h @ p["w2"] + p["b2"])
    return np.mean((h @ p["w3"] - y) ** 2)


def test_batch_equal_to_width_is_right_and_reuses_the_program() -> None:
    d, width = 3, 8
    p = {"w1": RNG.normal(size=(d, width)), "b1": RNG.normal(size=width),
         "w2": RNG.normal(size=(width, width)), "b2": RNG.normal(size=width),
         "w3": RNG.normal(size=(width, 2))}
    grad, reference = tj.grad(_mlp), tj.grad(_mlp, backend="interpret")
    for batch in (width, 5, width, 11):
        x, y = RNG.normal(size=(batch, d)), RNG.normal(size=(batch, 2))
        for got in _calls(grad, p, x, y, n=2):
            want = reference(p, x, y)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)
    info = grad.cache_info()
    assert (info["traces"], info["compiles"] + info["disk_loads"]) == (3, 1)


def test_names_that_clash_with_generated_code() -> None:
    for name in ("W", "S", "out0", "t_x", "i0_0", "body0"):
        fn = eval(f"lambda {name}: np.sum({name} * {name})")   # a parameter of that name
        x = RNG.normal(size=3)
        for got in _calls(tj.grad(fn), x):
            np.testing.assert_allclose(got, 2 * x)


def test_a_variable_name_that_is_no_identifier() -> None:
    w = tj.Variable(np.array([1.0, 2.0]), name="1st layer")
    for _ in range(3):
        with tj.GradientTape() as tape:
            y = np.sum(w * w)
        np.testing.assert_allclose(tape.gradient(y, w), [2.0, 4.0])


def _tape(fn, *shapes) -> Tape:
    return tj.make_tape(fn)(*[np.ones(s) for s in shapes])


def test_equal_lengths_are_not_one_axis() -> None:
    tape = _tape(lambda a, b: b * np.sin(a), (3,), (3, 1))
    names = Dims(tape).scope(tape)
    a, b = (names[v.name] for v in tape.invars)
    out = names[tape.outvars[0].name]
    assert a[0] != b[0] and out == (b[0], a[0])


def test_ops_tie_what_they_force() -> None:
    twice = _tape(lambda x, w: np.tanh(x @ w) @ w, (5, 4), (4, 4))
    names = Dims(twice).scope(twice)
    x, w = (names[v.name] for v in twice.invars)
    assert x[1] == w[0] == w[1]          # w's columns are contracted with its rows
    assert x[0] != x[1] and names[twice.outvars[0].name] == (x[0], w[0])
    back = _tape(lambda x, w: np.tanh(x @ w) @ w.T, (5, 4), (4, 4))
    names = Dims(back).scope(back)
    x, w = (names[v.name] for v in back.invars)
    assert x[1] == w[0] != w[1]          # (x @ w) @ w.T needs no square w


# control flow reading values whose every axis has length 1 (they live as Python locals in the
# generated code, and calls take arrays): found by `tapejit selfcheck`
def _scan_units(x):
    return np.sum(tj.scan(lambda c, x: (c * 0.5 + x, np.sin(c) * x),
                          np.sum(x, axis=0) * 0.0, x)[1])


def _cond_units(x):
    m = x.mean(axis=-1, keepdims=True)
    return np.sum(tj.cond(np.sum(m) > 0.0, lambda a: np.sin(a) * m, lambda a: a * 0.5, m))


def _fori_units(x):
    y = np.minimum(x, x)
    return np.sum(tj.fori_loop(0, 2, lambda i, c: np.tanh(c) * 0.5 + y, y))


@pytest.mark.parametrize("fn, shape", [(_scan_units, (3, 1)), (_scan_units, (2, 1, 1)),
                                       (_cond_units, (1, 3)), (_cond_units, (1,)),
                                       (_fori_units, (1,)), (_fori_units, (1, 1))])
def test_control_flow_over_unit_axes(fn, shape) -> None:
    x = RNG.normal(size=shape)
    for transform in (tj.jit, tj.grad):
        want = transform(fn, backend="interpret")(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", tj.TapejitWarning)   # no fallback to the interpreter
            for got in _calls(transform(fn), x):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    check_grads(fn, (x,), (0,), rtol=1e-5, atol=1e-7)


def _dims_of(fn, *shapes):
    tape = _tape(fn, *shapes)
    names = Dims(tape).scope(tape)
    return [names[v.name] for v in tape.invars], names[tape.outvars[0].name]


def test_reshape_keeps_the_axes_it_carries_over() -> None:
    (x,), out = _dims_of(lambda x: x.reshape(x.shape[0], 12), (5, 3, 4))
    assert out[0] == x[0] and out[1] not in x             # (5, 3, 4) -> (5, 12)
    (x,), out = _dims_of(lambda x: x.reshape(12, 3), (3, 4, 3))
    assert out[1] == x[2] and out[0] not in x             # (3, 4, 3) -> (12, 3)
    (x,), out = _dims_of(lambda x: x.reshape(1, 3, 1, 3), (3, 3))
    assert (out[1], out[3]) == (x[0], x[1]) and x[0] != x[1]


def test_slices_transposes_and_gathers() -> None:
    (x,), out = _dims_of(lambda x: x[1:].T, (4, 4))
    assert out[0] == x[1] and out[1] not in x             # a partial slice is a new axis
    (x, i), out = _dims_of(lambda x, i: x[:, i.astype(int)], (3, 5), (3,))
    assert out == (x[0], i[0]) and x[0] != i[0]           # take: x's rows, the index's axis


def test_a_view_of_a_reduction_reads_it_where_the_view_says() -> None:
    """rev of a sum finished inside the same loop nest: read reversed, not as the loop's local
    (found by `tapejit selfcheck`)."""
    def f(x, y):
        return np.sum(np.sin(x[::-1][..., None] - y[None, None, None]))
    x, y = RNG.normal(size=(2, 2, 2)), RNG.normal(size=2)
    want = tj.grad(f, (0, 1), backend="interpret")(x, y)
    for got in _calls(tj.grad(f, (0, 1)), x, y):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
