"""tj.vmap: JAX's semantics checked against a Python loop of the unbatched function.

Compiled programs (the suite compiles from the first call and checks every compiled call
against the interpreter), called twice; in_axes/out_axes variants, pytrees, nesting, every
order of composition with grad/jit/jacobian, batched indices, random keys, size-1 and size-0
batches, batch == feature width, errors. The op table (op_db.py): vmap of every row over a
leading axis, each input batched alone and all together, against the loop (interpreted: the
batching rules are the same for every backend; the compiled programs above cover the
backend).
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

import tapejit as tj
from op_db import ROWS
from tapejit import batching
from tapejit.ops import Kind
from tapejit.pytree import flatten

RNG = np.random.default_rng(0)


def loop(f, in_axes, *args, out_axis=0):
    """The reference: f on each example (a Python loop), stacked along `out_axis`."""
    size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, in_axes)])
            for b in range(size)]
    if isinstance(outs[0], tuple):
        return tuple(np.stack(o, axis=out_axis) for o in zip(*outs))
    return np.stack(outs, axis=out_axis)


def twice(fn, *args):
    """fn called twice (the first call compiles, the second runs the cached program)."""
    first, second = flatten(fn(*args))[0], fn(*args)
    for a, b in zip(first, flatten(second)[0], strict=True):
        np.testing.assert_array_equal(a, b)
    return second


def close(got, want, **kw):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, **kw)
        return
    assert np.shape(got) == np.shape(want), (np.shape(got), np.shape(want))
    np.testing.assert_allclose(got, want, **{"rtol": 1e-10, "atol": 1e-12, **kw})


# ---- in_axes and out_axes ---------------------------------------------------------------------
def h(x, y):
    """x: (4,) per example, y: (4,) per example or shared."""
    return np.tanh(x) * y + np.sum(x * y)


X = RNG.standard_normal((4, 4))      # batch == feature width: the axes collide
Y = RNG.standard_normal(4)
H_AXES = [(1, None), (-1, 0), (None, 0)]
H_VMAPS = {axes: tj.vmap(h, in_axes=axes) for axes in H_AXES}


@pytest.mark.parametrize("axes", H_AXES)
def test_in_axes(axes):
    y = Y if axes[1] is None else RNG.standard_normal((4, 4))
    got = twice(H_VMAPS[axes], X, y)
    close(got, loop(h, [a if a is None else a % 2 for a in axes], X, y))


def test_in_axes_int_none_and_axis_size():
    close(twice(tj.vmap(h), X, X.T), loop(h, [0, 0], X, X.T))
    shared = tj.vmap(h, in_axes=None, axis_size=3)
    close(twice(shared, X[0], Y), np.stack([h(X[0], Y)] * 3))


def tree_fn(p, x):
    return {"y": np.tanh(p["w"] @ x) + p["b"], "n": np.sum(x ** 2)}, x[::-1]


P = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(3)}
TREE = tj.vmap(tree_fn, in_axes=({"w": None, "b": 0}, 1), out_axes=({"y": 1, "n": 0}, -1))


def test_pytree_in_axes_and_out_axes():
    bs = RNG.standard_normal((5, 3))
    xs = RNG.standard_normal((4, 5))
    got = twice(TREE, {"w": P["w"], "b": bs}, xs)
    want = [tree_fn({"w": P["w"], "b": bs[k]}, xs[:, k]) for k in range(5)]
    close(got[0]["y"], np.stack([w[0]["y"] for w in want], axis=1))
    close(got[0]["n"], np.stack([w[0]["n"] for w in want]))
    close(got[1], np.stack([w[1] for w in want], axis=-1))


def test_prefix_in_axes_and_unmapped_output():
    f = tj.vmap(lambda ab, c: (ab[0] * ab[1] + c, np.sum(c)), in_axes=(0, None),
                out_axes=(0, None))
    a, b, c = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2)), RNG.standard_normal(2)
    got = twice(f, (a, b), c)
    close(got[0], a * b + c)
    close(got[1], np.sum(c))
    # an unmapped output with an int out_axes is broadcast to the batch
    k = tj.vmap(lambda x, c: (x + 1, c * 2), in_axes=(0, None), out_axes=(0, 1))
    got = twice(k, a, c)
    close(got[1], np.stack([c * 2] * 3, axis=1))


def test_keyword_arguments_are_mapped_over_axis_0():
    f = tj.vmap(lambda x, y: x * y, in_axes=(None,))
    close(f(Y, y=X), X * Y)


# ---- nesting and composition ------------------------------------------------------------------
OUTER = tj.vmap(tj.vmap(lambda a, b: np.sin(a) * b + a @ b, in_axes=(0, None)),
                in_axes=(None, 0))


def test_nested_vmap():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    want = np.array([[np.sin(a[i]) * b[j] + a[i] @ b[j] for i in range(3)] for j in range(5)])
    close(twice(OUTER, a, b), want)


def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    hidden = np.tanh(x @ w1 + b1)
    out = hidden @ w2 + b2
    return np.sum((out - y) ** 2)


PARAMS = (RNG.standard_normal((6, 6)) * 0.5, RNG.standard_normal(6) * 0.1,
          RNG.standard_normal((6, 2)) * 0.5, RNG.standard_normal(2) * 0.1)
PER_EXAMPLE = tj.vmap(tj.grad(mlp_loss), in_axes=(None, 0, 0))
LOOP_GRAD = tj.grad(mlp_loss, backend="interpret")


@pytest.mark.parametrize("batch", [6, 1, 0])     # batch == width, a single example, none
def test_per_example_gradients(batch):
    xs, ys = RNG.standard_normal((batch, 6)), RNG.standard_normal((batch, 2))
    got = twice(PER_EXAMPLE, PARAMS, xs, ys)
    assert len(got) == 4
    for k, p in enumerate(PARAMS):
        want = (np.stack([LOOP_GRAD(PARAMS, xs[b], ys[b])[k] for b in range(batch)])
                if batch else np.zeros((0,) + p.shape))
        close(got[k], want, rtol=1e-9)
    if batch:     # the per-example gradients sum to the batch gradient
        total = tj.grad(lambda p: sum(mlp_loss(p, xs[b], ys[b]) for b in range(batch)),
                        backend="interpret")(PARAMS)
        for k in range(4):
            close(np.sum(got[k], axis=0), total[k], rtol=1e-9)


GRAD_OF_VMAP = tj.grad(lambda w, xs: np.sum(tj.vmap(lambda x: np.tanh(x @ w))(xs) ** 2))


def test_grad_of_vmap():
    w, xs = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 4))
    got = twice(GRAD_OF_VMAP, w, xs)
    t = np.tanh(xs @ w)
    close(got, xs.T @ (2 * t * (1 - t ** 2)), rtol=1e-9)


JIT_OF_VMAP = tj.jit(tj.vmap(lambda x, y: np.linalg.norm(x - y), in_axes=(0, None)))
VMAP_OF_JIT = tj.vmap(tj.jit(lambda x, y: np.cumsum(x * y)[::-1]), in_axes=(1, None))


def test_jit_of_vmap_and_vmap_of_jit():
    x = RNG.standard_normal((4, 4))
    close(twice(JIT_OF_VMAP, x, Y), np.linalg.norm(x - Y, axis=1))
    close(twice(VMAP_OF_JIT, x, Y), loop(lambda a, b: np.cumsum(a * b)[::-1], [1, None], x, Y))


JAC_OF_VMAP = tj.jacobian(tj.vmap(lambda x: np.sin(x) * np.sum(x)))
VG_VMAP = tj.vmap(tj.value_and_grad(lambda x, y: np.sum(np.exp(x) * y)), in_axes=(0, None))


def test_jacobian_and_value_and_grad():
    x = RNG.standard_normal((3, 3))
    jac = twice(JAC_OF_VMAP, x)
    want = np.zeros((3, 3, 3, 3))
    for b in range(3):
        want[b, :, b, :] = np.diag(np.cos(x[b]) * np.sum(x[b])) + np.sin(x[b])[:, None]
    close(jac, want)
    x = RNG.standard_normal((3, 4))
    values, grads = twice(VG_VMAP, x, Y)
    close(values, np.sum(np.exp(x) * Y, axis=1))
    close(grads, np.exp(x) * Y)


def test_against_jax(jax_x64):
    """The same in_axes/out_axes (negative, pytree prefixes) and per-example gradients in JAX
    give the same results (where the test environment has JAX)."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    y2 = RNG.standard_normal((4, 4))
    for axes in H_AXES:
        y = Y if axes[1] is None else y2
        want = jax.vmap(lambda x, y: jnp.tanh(x) * y + jnp.sum(x * y), in_axes=axes)(X, y)
        close(H_VMAPS[axes](X, y), np.asarray(want))
    bs, xs = RNG.standard_normal((5, 3)), RNG.standard_normal((4, 5))
    want = jax.vmap(lambda p, x: ({"y": jnp.tanh(p["w"] @ x) + p["b"], "n": jnp.sum(x ** 2)},
                                  x[::-1]),
                    in_axes=({"w": None, "b": 0}, 1), out_axes=({"y": 1, "n": 0}, -1))(
        {"w": P["w"], "b": bs}, xs)
    got = TREE({"w": P["w"], "b": bs}, xs)
    close((got[0]["y"], got[0]["n"], got[1]),
          tuple(np.asarray(a) for a in (want[0]["y"], want[0]["n"], want[1])))

    def jloss(params, x, y):
        w1, b1, w2, b2 = params
        return jnp.sum((jnp.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)

    xs, ys = RNG.standard_normal((6, 6)), RNG.standard_normal((6, 2))
    want = jax.vmap(jax.grad(jloss), in_axes=(None, 0, 0))(PARAMS, xs, ys)
    close(PER_EXAMPLE(PARAMS, xs, ys), tuple(np.asarray(w) for w in want), rtol=1e-9)


# ---- gathers, scatters, pads, sorting and random keys with batched operands --------------------
def gathers(x, labels, idx, v, table):
    """x: (4, 4), labels: (3,) ints, idx: (4, 2) ints, v: () pad value, per example; table:
    (4, 4), shared by every example."""
    one_hot = np.eye(4)[labels]                           # the one-hot idiom
    picked = np.take_along_axis(x, idx, axis=1)           # batched x and indices
    rows = x[labels]                                      # a gather along axis 0
    shared = table[labels] + np.take_along_axis(table, idx, axis=1).sum()  # a shared operand
    y = np.zeros_like(x)
    np.add.at(y, labels, rows * 2.0)                      # a scatter with batched indices
    padded = np.pad(x, 1, constant_values=v)              # a batched pad value
    order = np.sort(x, axis=0)[:, ::-1]
    where = np.searchsorted(np.sort(x[0]), x[1])          # a sorted array per example
    return one_hot @ x, picked, rows, shared, y, padded, order, where


GATHERS = tj.vmap(gathers, in_axes=(0, 0, 0, 0, None))


def test_batched_gathers_scatters_pads_sorts():
    args = (RNG.standard_normal((4, 4, 4)), RNG.integers(0, 4, (4, 3)),
            RNG.integers(0, 4, (4, 4, 2)), RNG.standard_normal(4), RNG.standard_normal((4, 4)))
    close(twice(GATHERS, *args), loop(gathers, [0, 0, 0, 0, None], *args))


def test_searchsorted_nan_order_per_example():
    a = np.sort(np.array([[0.0, 1.0, np.nan], [np.nan, np.nan, np.nan], [-1.0, 2.0, 2.0]]),
                axis=1)
    v = np.array([[np.nan, 1.0, 5.0], [0.0, np.nan, 1.0], [2.0, np.nan, -3.0]])
    f = tj.vmap(lambda a, v: (np.searchsorted(a, v), np.searchsorted(a, v, side="right")))
    close(twice(f, a, v), loop(lambda a, v: (np.searchsorted(a, v),
                                             np.searchsorted(a, v, side="right")), [0, 0], a, v))


def draws(key, scale):
    k1, k2 = tj.random.split(key)
    return (tj.random.normal(k1, (3,)) * scale, tj.random.uniform(k2, (2, 2)),
            tj.random.randint(k2, (4,), 0, 10))


DRAWS = tj.vmap(draws, in_axes=(0, None))


def test_random_keys_batched_give_per_example_streams():
    keys = tj.random.split(tj.random.key(7), 5)
    got = twice(DRAWS, keys, 2.0)
    want = loop(lambda k: draws(k, 2.0), [0], keys)
    close(got[0], want[0], rtol=1e-15)        # libm's log/cos against numpy's: an ulp
    np.testing.assert_array_equal(got[1], want[1])      # the same bits
    np.testing.assert_array_equal(got[2], want[2])
    assert not np.allclose(got[0][0], got[0][1])           # the examples differ


# ---- user code: custom_vjp functions and njit kernels (a compiled loop over the batch) ---------
@tj.custom_vjp
def clipped_square(x):
    return x * x


clipped_square.defvjp(lambda x: (clipped_square(x), x),
                      lambda x, ct: (ct * np.clip(2 * x, -1.0, 1.0),))   # a rule, not 2x


@numba.njit
def _cube_kernel(x):
    return x * x * x


cube = tj.njit_primitive(_cube_kernel, vjp=lambda ct, out, x: (3 * ct * x * x,))
USER = tj.vmap(tj.value_and_grad(lambda x, w: np.sum(clipped_square(x * w) + cube(x))),
               in_axes=(0, None))


def test_custom_vjp_and_njit_primitives_per_example():
    xs, w = RNG.standard_normal((4, 4)), RNG.uniform(0.5, 2.0, 4)
    values, grads = twice(USER, xs, w)
    close(values, np.sum((xs * w) ** 2 + xs ** 3, axis=1))
    close(grads, np.clip(2 * xs * w, -1, 1) * w + 3 * xs ** 2)


def test_without_a_mapper_user_code_is_an_error_at_its_line(monkeypatch):
    monkeypatch.setattr(batching, "_mapper", None)
    with pytest.raises(tj.UnsupportedOperationError,
                       match=r"(?s)custom_vjp_call has no batching rule.*test_vmap.py"):
        tj.vmap(lambda x: clipped_square(x))(np.ones((2, 3)))


# ---- no unrolling -------------------------------------------------------------------------------
def test_tape_does_not_grow_with_the_batch():
    f = tj.vmap(tj.grad(lambda x, i: np.sum(np.take_along_axis(np.sort(x), i, 0) ** 2)
                        + np.sum(np.pad(x, 1) * x[i].sum())))
    sizes = []
    for batch in (2, 64):
        x, i = RNG.standard_normal((batch, 5)), RNG.integers(0, 5, (batch, 5))
        sizes.append(len(tj.make_tape(f)(x, i).eqns))
    assert sizes[0] == sizes[1], sizes


# ---- errors -------------------------------------------------------------------------------------
def test_errors():
    with pytest.raises(tj.ShapeError, match=r"different sizes: x .* has 3 .* y .* has 4"):
        tj.vmap(h)(np.ones((3, 4)), np.ones((4, 4)))
    with pytest.raises(tj.ArgumentError, match="1 entries but the function was called with 2"):
        tj.vmap(h, in_axes=(0,))(X, Y)
    with pytest.raises(tj.ArgumentError, match="not a pytree prefix"):
        tj.vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": X})
    with pytest.raises(tj.ArgumentError, match="in_axes must be an int, None, or a tuple"):
        tj.vmap(h, in_axes={"x": 0})(X, Y)
    with pytest.raises(tj.ArgumentError, match="out_axes is None for output 0"):
        tj.vmap(h, out_axes=None)(X, X)
    with pytest.raises(tj.ShapeError, match=r"in_axes 2 is out of range for argument x"):
        tj.vmap(h, in_axes=(2, None))(X, Y)
    with pytest.raises(tj.ShapeError, match=r"out_axes 3 is out of range"):
        tj.vmap(h, out_axes=3)(X, X)
    with pytest.raises(tj.ArgumentError, match="give axis_size"):
        tj.vmap(h, in_axes=None)(X, Y)
    with pytest.raises(tj.ShapeError, match="axis_size=5"):
        tj.vmap(h, axis_size=5)(X, X)
    with pytest.raises(tj.ShapeError, match="out of range for argument x"):
        tj.vmap(h)(1.0, Y)                 # a Python scalar has no axis to map
    with pytest.raises(tj.ArgumentError, match="test_vmap.py"):      # the user's line
        tj.vmap(h, in_axes=[0, 0, 0])(X, Y)


# ---- the op table -------------------------------------------------------------------------------
def _leaves(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _examples(sample, rng):
    """Three examples from a row's sample: it and two shuffles of its elements (in the row's
    domain, distinct where the row needs it)."""
    return [sample] + [[rng.permutation(a.ravel()).reshape(a.shape) for a in sample]
                       for _ in range(2)]


@pytest.mark.parametrize("row", [r for r in ROWS if r.args is None], ids=lambda r: r.name)
def test_op_table_rows(row, monkeypatch):
    mapped = []        # the ops that ran in a loop over the batch: user code and control flow
    mapper = batching._mapper
    monkeypatch.setattr(batching, "_mapper", lambda op, *rest: (mapped.append(op), mapper(
        op, *rest))[1])
    rng = np.random.default_rng(1)
    sample = row.samples(row.dtypes[0])[-1]
    examples = _examples(sample, rng)
    n = len(sample)
    ref = row.ref or row.fn
    combos = [tuple(0 if j == i else None for j in range(n)) for i in range(n)]
    for axes in combos + ([(0,) * n] if n > 1 else []):
        args = [np.stack([e[i] for e in examples]) if ax == 0 else sample[i]
                for i, ax in enumerate(axes)]
        with np.errstate(all="ignore"):
            got = _leaves(tj.vmap(row.fn, in_axes=axes, backend="interpret")(*args))
            want = [_leaves(ref(*[e[i] if ax == 0 else sample[i].copy()
                                  for i, ax in enumerate(axes)])) for e in examples]
        for k, leaf in enumerate(got):
            np.testing.assert_allclose(leaf, np.stack([w[k] for w in want]), rtol=1e-6,
                                       atol=1e-9, err_msg=f"{row.name} in_axes={axes} "
                                                          f"output {k}")
    assert all(op.kind in (Kind.CALL, Kind.CONTROL) for op in mapped), mapped
