"""The public transforms as a user meets them: pytrees, argnums, has_aux, scalars and weak
typing, static arguments, keywords, vjp, make_tape, closures, the per-signature cache, nesting."""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads, check_vjp
from tapejit.pytree import flatten

Params = collections.namedtuple("Params", "w b")


@dataclasses.dataclass
class Layer:
    w: np.ndarray
    b: np.ndarray


def _assert_like(grad, arg):
    """`grad` has the pytree structure, shapes and dtypes of `arg`."""
    g_leaves, g_td = flatten(grad)
    a_leaves, a_td = flatten(arg)
    assert g_td == a_td
    for g, a in zip(g_leaves, a_leaves):
        assert np.shape(g) == np.shape(a)
        assert np.asarray(g).dtype == np.asarray(a).dtype


def _counting(fn):
    """`fn` with a counter of how many times it ran (= traced, under a transform)."""
    def counted(*args, **kwargs):
        counted.calls += 1
        return fn(*args, **kwargs)
    counted.calls = 0
    return counted


# --- pytrees ----------------------------------------------------------------------------------
def _tree_loss(p, x):
    return np.sum(np.tanh(x @ p.w + p.b) ** 2)


@pytest.mark.parametrize("make", [
    lambda w, b: Params(w, b),
    lambda w, b: Layer(w, b),
], ids=["namedtuple", "dataclass"])
def test_structured_params(make):
    rng = np.random.default_rng(0)
    p = make(rng.standard_normal((3, 2)), rng.standard_normal(2))
    x = rng.standard_normal((4, 3))
    g = tj.grad(_tree_loss)(p, x)
    assert type(g) is type(p)
    _assert_like(g, p)
    check_grads(_tree_loss, (p, x))


def test_nested_dict_list_tuple_params():
    rng = np.random.default_rng(1)
    params = {"layers": [(rng.standard_normal((3, 3)), rng.standard_normal(3)),
                         (rng.standard_normal((3, 1)), rng.standard_normal(1))],
              "scale": np.float32(2.0), "unused": None}

    def loss(params, x):
        h = x
        for w, b in params["layers"]:
            h = np.tanh(h @ w + b)
        return np.sum(h) * params["scale"]

    x = rng.standard_normal((5, 3))
    g = tj.grad(loss)(params, x)
    _assert_like(g, params)
    assert isinstance(g["layers"], list) and isinstance(g["layers"][0], tuple)
    assert g["unused"] is None
    check_grads(lambda p, x: loss(p, x), (params, x), rtol=1e-4, atol=1e-5)


def test_float32_pytree_keeps_dtypes():
    p = {"w": np.ones((2, 2), np.float32), "b": np.zeros(2, np.float32)}
    value, g = tj.value_and_grad(lambda p: np.sum(np.exp(p["w"] + p["b"])))(p)
    assert np.asarray(value).dtype == np.float32
    _assert_like(g, p)


# --- argnums ----------------------------------------------------------------------------------
def _f3(x, y, z):
    return np.sum(x * np.sin(y) + z ** 2 * y)


X, Y, Z = np.array([1.0, 2.0]), np.array([0.5, -0.3]), np.array([3.0, 1.5])


def test_argnums_int_and_tuple():
    gx = tj.grad(_f3)(X, Y, Z)
    gy = tj.grad(_f3, argnums=1)(X, Y, Z)
    both = tj.grad(_f3, argnums=(0, 2))(X, Y, Z)
    np.testing.assert_allclose(gx, np.sin(Y))
    np.testing.assert_allclose(gy, X * np.cos(Y) + Z ** 2)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[0], np.sin(Y))
    np.testing.assert_allclose(both[1], 2 * Z * Y)
    single = tj.grad(_f3, argnums=(1,))(X, Y, Z)
    assert isinstance(single, tuple) and len(single) == 1
    check_grads(_f3, (X, Y, Z), argnums=(0, 1, 2))


def test_negative_argnums():
    np.testing.assert_allclose(tj.grad(_f3, argnums=-1)(X, Y, Z), 2 * Z * Y)
    gy, gz = tj.grad(_f3, argnums=(-2, -1))(X, Y, Z)
    np.testing.assert_allclose(gy, X * np.cos(Y) + Z ** 2)
    np.testing.assert_allclose(gz, 2 * Z * Y)


def test_numpy_integer_argnums():
    np.testing.assert_allclose(tj.grad(_f3, argnums=np.int64(2))(X, Y, Z), 2 * Z * Y)


# --- has_aux ----------------------------------------------------------------------------------
def _with_aux(w, x):
    pred = x @ w
    return np.sum(pred ** 2), {"pred": pred, "n": np.argmax(pred)}


def test_has_aux_grad_and_value_and_grad():
    w, x = np.array([1.0, -2.0]), np.array([[1.0, 0.5], [0.2, 0.3], [2.0, 1.0]])
    g, aux = tj.grad(_with_aux, has_aux=True)(w, x)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w))
    np.testing.assert_allclose(aux["pred"], x @ w)
    assert aux["n"] == np.argmax(x @ w) and np.asarray(aux["n"]).dtype.kind == "i"
    (value, aux2), g2 = tj.value_and_grad(_with_aux, has_aux=True)(w, x)
    np.testing.assert_allclose(value, np.sum((x @ w) ** 2))
    np.testing.assert_allclose(g2, g)
    np.testing.assert_allclose(aux2["pred"], x @ w)


# --- scalars, weak typing, 0-d arrays ---------------------------------------------------------
def test_python_scalar_arguments():
    g = tj.grad(lambda x, y: x ** 3 * y, argnums=(0, 1))(2.0, 5.0)
    np.testing.assert_allclose(g, (60.0, 8.0))


def test_python_float_is_weak_with_float32_array():
    x = np.ones(3, np.float32)
    value, (gx, gs) = tj.value_and_grad(lambda x, s: np.sum(x * s), argnums=(0, 1))(x, 2.5)
    assert np.asarray(value).dtype == np.float32
    assert gx.dtype == np.float32
    np.testing.assert_allclose(gx, 2.5)
    np.testing.assert_allclose(gs, 3.0)


def test_numpy_scalar_arguments_are_not_weak():
    x = np.ones(3, np.float32)
    f = lambda x, s: np.sum(x * s)  # noqa: E731
    value, g = tj.value_and_grad(f, argnums=1)(x, np.float64(2.0))
    assert np.asarray(value).dtype == f(x, np.float64(2.0)).dtype == np.float64
    assert np.asarray(g).dtype == np.float64 and g == 3.0
    value32, g32 = tj.value_and_grad(f, argnums=1)(x, np.float32(2.0))
    assert np.asarray(value32).dtype == np.float32 and np.asarray(g32).dtype == np.float32


def test_zero_dim_arrays():
    x = np.array(1.5)
    value, g = tj.value_and_grad(lambda x: np.sin(x) * x)(x)
    np.testing.assert_allclose(value, np.sin(1.5) * 1.5)
    np.testing.assert_allclose(g, np.cos(1.5) * 1.5 + np.sin(1.5))
    assert np.shape(g) == () and isinstance(g, np.ndarray) and g.dtype == np.float64
    g32 = tj.grad(lambda x: x * x)(np.array(3.0, np.float32))
    assert np.shape(g32) == () and g32.dtype == np.float32 and g32 == 6.0


def test_scalar_argument_values_are_not_baked_in():
    f = _counting(lambda x, lr: np.sum(x * lr) ** 2)
    g = tj.grad(f)
    x = np.ones(2)
    np.testing.assert_allclose(g(x, 0.5), 2 * 1.0 * 0.5)
    np.testing.assert_allclose(g(x, 2.0), 2 * 4.0 * 2.0)
    assert f.calls == 1


# --- static arguments -------------------------------------------------------------------------
def test_static_argnums_value_in_key():
    f = _counting(lambda x, k: np.sum(x ** k))
    g = tj.grad(f, static_argnums=1)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(g(x, 2), 2 * x)
    np.testing.assert_allclose(g(x, 3), 3 * x ** 2)
    assert f.calls == 2
    np.testing.assert_allclose(g(x, 2), 2 * x)
    assert f.calls == 2


def test_static_argument_controls_python_branch():
    def f(x, mode):
        return np.sum(x ** 2) if mode == "square" else np.sum(np.abs(x))
    g = tj.grad(f, static_argnums=(1,))
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(g(x, "square"), 2 * x)
    np.testing.assert_allclose(g(x, "abs"), np.sign(x))
    np.testing.assert_allclose(g(x, mode="abs"), np.sign(x))


def test_static_argnames_by_position_or_by_name():
    """JAX's static_argnames: static whether passed by position or by name, also after an
    earlier parameter left to its default; a static argument not given takes its default;
    names that cannot be static are refused where the transform is made."""
    def f(x, scale=1.0, mode="single", power=2):
        return np.sum(x * scale) * (2.0 if mode == "double" else 1.0) ** power
    g = tj.jit(f, static_argnames=("mode", "power"))
    d = tj.grad(f, static_argnames="mode")
    x = np.array([1.0, 2.0])
    for args, kwargs in [((x,), {"mode": "double"}), ((x, 1.0, "double"), {}),
                         ((x,), {"scale": 3.0, "mode": "double", "power": 1}), ((x,), {}),
                         ((x, 2.0, "double", 3), {}), ((x,), {"power": 3})]:
        np.testing.assert_allclose(g(*args, **kwargs), f(*args, **kwargs))
        slope = f(np.array([1.0, 0.0]), *args[1:], **kwargs)      # f is linear in x
        np.testing.assert_allclose(d(*args, **kwargs), [slope, slope])
    with pytest.raises(tj.ArgumentError, match="static_argnames 'nope' is no parameter of f"):
        tj.jit(f, static_argnames="nope")
    with pytest.raises(tj.ArgumentError, match="'kw' is <lambda>'s variadic keyword parameter"):
        tj.jit(lambda x, **kw: x, static_argnames="kw")
    with pytest.raises(tj.ArgumentError, match="static argument mode is an unhashable list"):
        g(x, mode=["double"])
    with pytest.raises(tj.ArgumentError, match="static_argnames for one passed by name"):
        tj.jit(f)(x, mode="double")


def test_static_keyword_only_parameters():
    """`def f(x, *, k, training=False)`: a keyword-only parameter is static by name (JAX's
    flax-style `training` flag), traced keyword-only arguments stay traced, and a static one
    left out takes its default; compiled calls agree with numpy on every call."""
    def f(x, *, k, training=False, scale=2.0):
        y = x * k * scale
        return np.sum(y ** 2) if training else np.sum(y)
    j = tj.jit(f, static_argnames="training")
    g = tj.grad(f, static_argnames=("training",))
    x = np.array([1.0, 2.0])
    for _ in range(3):
        for kwargs in ({"k": 3.0}, {"k": 3.0, "training": True}, {"k": 0.5, "scale": 1.0}):
            np.testing.assert_allclose(j(x, **kwargs), f(x, **kwargs))
        np.testing.assert_allclose(g(x, k=3.0, training=True), 2 * 36.0 * x)
        np.testing.assert_allclose(g(x, k=2.0), [4.0, 4.0])
    with pytest.raises(tj.ArgumentError, match="static argument training is an unhashable"):
        j(x, k=1.0, training=[True])
    tape = tj.make_tape(f, static_argnames="training")(x, k=1.0, training=True)
    assert [v.name for v in tape.invars] == ["x", "k"]


def test_results_are_the_callers_own_arrays():
    """An output that is an input (`x.copy()` simplified away, `x + 0`), a view of one, a
    program constant or a constant gradient came back as that very array: writing into it
    (`g *= 0.5`) changed the argument, or every later call's result. Results are fresh and
    writeable on every tier."""
    data = np.array([4.0, 5.0, 6.0])
    for backend in ("interpret", "numba"):
        x = np.arange(4.0)
        for fn in (lambda x: x.copy(), lambda x: x + 0, lambda x: x.reshape(2, 2).T,
                   lambda x: x[1:], lambda x: np.asarray(x)):
            jitted = tj.jit(fn, backend=backend)
            for _ in range(3):
                y = jitted(x)
                y[...] = -1.0
                np.testing.assert_array_equal(x, np.arange(4.0))
        const = tj.jit(lambda x: (np.array([1.0, 2.0]), x * 2), backend=backend)
        linear = tj.grad(lambda w, d: np.sum(w * d) + np.sum(w[:1]), backend=backend)
        for _ in range(3):
            c, _ = const(x)
            np.testing.assert_array_equal(c, [1.0, 2.0])
            c *= 100
            g = linear(np.zeros(3), data)
            np.testing.assert_array_equal(g, data + [1, 0, 0])
            g *= 0.5                            # (it was data itself, or read-only)
        np.testing.assert_array_equal(data, [4.0, 5.0, 6.0])


def test_unhashable_static_argument():
    g = tj.grad(lambda x, ks: np.sum(x ** ks[0]), static_argnums=1)
    with pytest.raises(tj.ArgumentError, match=r"static argument 1 is an unhashable list"):
        g(np.ones(2), [2, 3])
    np.testing.assert_allclose(g(np.ones(2), (2, 3)), [2.0, 2.0])


def test_static_argnums_out_of_range():
    with pytest.raises(tj.ArgumentError, match="static_argnums 3 is out of range"):
        tj.grad(lambda x: x, static_argnums=3)(1.0)


# --- keyword arguments ------------------------------------------------------------------------
def test_keyword_arguments():
    def f(x, y=1.0, z=2.0):
        return np.sum(x * y + z)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(tj.grad(f)(x, y=3.0), [3.0, 3.0])
    np.testing.assert_allclose(tj.grad(f)(x, z=1.0), [1.0, 1.0])  # y missing: z by keyword
    np.testing.assert_allclose(tj.grad(f, argnums=1)(x=x, y=3.0), 3.0)


def test_keyword_only_arguments_are_traced_not_differentiated():
    def f(x, *, scale, bias=0.0):
        return np.sum(x * scale + bias)
    f_counted = _counting(f)
    g = tj.grad(f_counted)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(g(x, scale=np.array([2.0, 3.0])), [2.0, 3.0])
    np.testing.assert_allclose(g(x, scale=np.array([4.0, 5.0])), [4.0, 5.0])
    assert f_counted.calls == 1


# --- vjp --------------------------------------------------------------------------------------
def _tree_out(x, y):
    return {"a": x * y, "b": (np.sin(x), np.sum(y))}


def test_vjp_pytree_output():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    out, vjp_fn = tj.vjp(_tree_out, x, y)
    want = _tree_out(x, y)
    np.testing.assert_allclose(out["a"], want["a"])
    np.testing.assert_allclose(out["b"][0], want["b"][0])
    ct = {"a": np.ones(3), "b": (np.full(3, 2.0), 3.0)}
    gx, gy = vjp_fn(ct)
    np.testing.assert_allclose(gx, y + 2 * np.cos(x))
    np.testing.assert_allclose(gy, x + 3.0)
    check_vjp(_tree_out, (x, y))


def test_vjp_with_aux():
    out, vjp_fn, aux = tj.vjp(lambda x: (x ** 2, {"m": np.max(x)}), np.array([1.0, 3.0]),
                              has_aux=True)
    np.testing.assert_allclose(out, [1.0, 9.0])
    assert aux["m"] == 3.0
    np.testing.assert_allclose(vjp_fn(np.ones(2))[0], [2.0, 6.0])


def test_vjp_wrong_cotangent_structure():
    _, vjp_fn = tj.vjp(_tree_out, np.ones(3), np.ones(3))
    with pytest.raises(tj.ArgumentError, match=r"structure \{'a': \*, 'b': \*\}.*"
                                                r"\{'a': \*, 'b': \(\*, \*\)\}") as info:
        vjp_fn({"a": np.ones(3), "b": np.ones(3)})
    assert "test_api.py" in str(info.value)
    with pytest.raises(tj.ArgumentError, match=r"cotangent of shape \(4,\).*shape \(3,\)"):
        vjp_fn({"a": np.ones(4), "b": (np.ones(3), 1.0)})


# --- make_tape, closures ----------------------------------------------------------------------
def test_make_tape_prints():
    def f(x, w):
        return np.sum(np.exp(x * w))
    tape = tj.make_tape(f)(np.ones((3, 4)), np.ones(4))
    text = str(tape)
    assert "x:f64[3,4]" in text and "w:f64[4]" in text
    assert "exp" in text and "reduce_sum" in text and "test_api.py" in text
    grad_text = str(tj.make_tape(tj.grad(f))(np.ones((3, 4)), np.ones(4)))
    assert "exp" in grad_text and "mul" in grad_text


def test_closure_over_numpy_constants():
    c = np.array([1.0, -2.0, 3.0])
    scale = 0.5
    f = lambda x: np.sum(c * x ** 2) * scale  # noqa: E731
    x = np.array([0.3, 0.7, -1.1])
    np.testing.assert_allclose(tj.grad(f)(x), c * x)
    check_grads(f, (x,))


# --- the per-signature cache ------------------------------------------------------------------
def test_cache_no_retrace_for_same_signature():
    f = _counting(lambda x: np.sum(np.sin(x)))
    g = tj.grad(f)
    g(np.ones(3))
    g(np.zeros(3))
    np.testing.assert_allclose(g(np.full(3, 0.5)), np.cos(0.5))
    assert f.calls == 1
    g(np.ones(4))                               # new shape
    g(np.ones(3, np.float32))                   # new dtype
    g(np.float64(1.0))                          # 0-d
    assert f.calls == 4
    g(1.0)                                      # weak Python scalar: a new signature
    assert f.calls == 5


def test_cache_keyed_on_pytree_structure():
    f = _counting(lambda p: sum(np.sum(v ** 2) for v in p.values()))
    g = tj.grad(f)
    g({"a": np.ones(2), "b": np.ones(2)})
    g({"a": np.zeros(2), "b": np.ones(2)})
    assert f.calls == 1
    gb = g({"b": np.ones(2), "a": 2 * np.ones(2)})   # the same dict built in another order
    assert f.calls == 1 and list(gb) == ["a", "b"]    # one signature, as JAX's sorted keys
    np.testing.assert_allclose(gb["a"], 4.0)
    np.testing.assert_allclose(gb["b"], 2.0)
    g({"a": np.ones(2), "c": np.ones(2)})             # other keys: a new structure
    assert f.calls == 2


def test_dict_keys_that_do_not_compare_have_one_order():
    f = tj.grad(lambda p: p[1] * p["x"] ** 2)
    for params in ({1: 3.0, "x": 2.0}, {"x": 2.0, 1: 3.0}):
        grads = f(params)
        assert list(grads) == [1, "x"] and grads == {1: 4.0, "x": 12.0}
    assert f.cache_info()["traces"] == 1


# --- nesting ----------------------------------------------------------------------------------
def test_higher_order_scalar():
    f = lambda x: np.sin(x) * x ** 2  # noqa: E731
    d1 = lambda x: np.cos(x) * x ** 2 + 2 * x * np.sin(x)  # noqa: E731
    d2 = lambda x: -np.sin(x) * x ** 2 + 4 * x * np.cos(x) + 2 * np.sin(x)  # noqa: E731
    d3 = lambda x: -np.cos(x) * x ** 2 - 6 * x * np.sin(x) + 6 * np.cos(x)  # noqa: E731
    for x in (0.7, -1.3):
        np.testing.assert_allclose(tj.grad(f)(x), d1(x))
        np.testing.assert_allclose(tj.grad(tj.grad(f))(x), d2(x))
        np.testing.assert_allclose(tj.grad(tj.grad(tj.grad(f)))(x), d3(x))


def test_higher_order_exp_tanh():
    x = np.float64(0.4)
    t = np.tanh(x)
    np.testing.assert_allclose(tj.grad(tj.grad(np.tanh))(x), -2 * t * (1 - t ** 2))
    np.testing.assert_allclose(tj.grad(tj.grad(tj.grad(np.exp)))(x), np.exp(x))


def test_grad_of_value_and_grad_inside():
    def f(x):
        value, g = tj.value_and_grad(lambda y: np.sum(y ** 3))(x)
        return value + np.sum(g * x)        # sum x^3 + 3 x^3 = 4 sum x^3
    x = np.array([1.0, 2.0, -0.5])
    np.testing.assert_allclose(tj.grad(f)(x), 12 * x ** 2)
    check_grads(f, (x,))


def test_inner_grad_closing_over_outer_tracer():
    def f(a):
        return tj.grad(lambda x: np.sin(a * x))(1.0)   # a cos(a)
    np.testing.assert_allclose(tj.grad(f)(0.8), np.cos(0.8) - 0.8 * np.sin(0.8))


# --- unconnected inputs -----------------------------------------------------------------------
def test_unconnected_inputs_get_zeros():
    x32, y = np.ones((2, 3), np.float32), np.ones(4)
    gx, gy, gp = tj.grad(lambda x, y, p: np.sum(y) * 2.0, argnums=(0, 1, 2))(
        x32, y, {"k": np.ones(2, np.float32)})
    assert gx.shape == (2, 3) and gx.dtype == np.float32 and not gx.any()
    np.testing.assert_allclose(gy, 2.0)
    assert gp["k"].dtype == np.float32 and not gp["k"].any()


def test_int_argument_not_differentiated_flows_through():
    g = tj.grad(lambda x, i: x[i] * 2.0)(np.arange(3.0), 1)
    np.testing.assert_allclose(g, [0.0, 2.0, 0.0])


# --- in-place updates -------------------------------------------------------------------------
def _inplace_alias(x):
    y = x
    y += 1.0                 # numpy updates x too: y is x
    y *= x
    return np.sum(x)


def _assign_into_argument(x):
    x[0] = 5.0
    x[1:] *= 2.0
    return np.sum(x * x)


@pytest.mark.parametrize("fn", [_inplace_alias, _assign_into_argument], ids=lambda f: f.__name__)
def test_inplace_updates_match_numpy(fn):
    x = np.array([0.5, -1.0, 2.0])
    value, _ = tj.value_and_grad(fn)(x)
    np.testing.assert_allclose(value, fn(x.copy()))
    check_grads(lambda x: fn(x.copy()), (x,))


def test_inplace_keeps_dtype():
    def f(x):
        x += np.ones(3)              # float64 operand: x stays float32, as in numpy
        return np.sum(x)
    value, g = tj.value_and_grad(f)(np.ones(3, np.float32))
    assert np.asarray(value).dtype == np.float32 and g.dtype == np.float32


def test_tree_map_structure_mismatch():
    with pytest.raises(tj.ArgumentError, match="structure"):
        tj.tree_map(np.add, {"a": 1.0, "b": 2.0}, {"a": 1.0})
    assert tj.tree_map(np.add, [1.0, (2.0,)], [3.0, (4.0,)]) == [4.0, (6.0,)]


def test_all_lists_every_public_name():
    public = {n for n in dir(tj) if not n.startswith("_")
              and type(getattr(tj, n)).__name__ != "module"}
    assert public | {"optimizers", "random"} == set(tj.__all__)     # the public submodules


def test_arrays_made_while_tracing_are_arguments_of_inner_transforms():
    """np.ones/np.arange inside a traced function make tapejit's Constant (an ndarray
    subclass that records gathers by traced indices): an inner jit or vmap takes it as the
    plain array it is, first and later calls."""
    inner_jit = tj.jit(lambda a, b: a * b)
    inner_vmap = tj.vmap(lambda a, b: a * b)

    def loss(x):
        return np.sum(inner_jit(x, np.arange(3.0))) + np.sum(
            inner_vmap(x[None] * np.ones((4, 1)), np.ones(4)[:, None] * np.arange(3.0)))

    for x in (np.ones(3), np.linspace(-1.0, 1.0, 3)):
        np.testing.assert_allclose(tj.grad(loss)(x), 5 * np.arange(3.0), rtol=1e-14)
