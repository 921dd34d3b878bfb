"""Python control flow on traced values (issue 35): a Python `if`, `while`, `break`, `bool()`,
`int()` or an index that needs a traced value gets the value computed from the call being
traced, and the program is guarded on it (trace.guarded_value, programs._evaluator,
dispatch's variants): a call giving other values traces again, a variant kept beside the
first. Compiled (conftest: first and later calls, verified against the interpreter), checked
against numpy and central differences. What cannot be guarded keeps a clear error: a traced
float read as a number (its derivative would be lost), per-example values in vmap, per-step
values in loop bodies, TAPEJIT_STRICT=1, more than MAX_VARIANTS values."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.transforms import sharing, variants

from gradcheck import check_grads


def piecewise(x):
    if np.sum(x) > 0:
        return np.sum(x ** 2)
    return -np.sum(np.sin(x))


def test_an_if_on_data_runs_the_branch_the_call_takes():
    g = tj.grad(piecewise)
    pos, neg = np.array([1.0, 2.0, -0.5]), np.array([-1.0, 0.3, -2.0])
    for x in (pos, neg, pos, neg):
        np.testing.assert_allclose(g(x), 2 * x if np.sum(x) > 0 else -np.cos(x))
        np.testing.assert_allclose(tj.jit(piecewise)(x), piecewise(x))
    info = g.cache_info()
    assert info["traces"] == 2 and info["programs"] == 2 and info["hits"] == 2
    assert "branched on" in info["last_miss"]
    check_grads(piecewise, [pos])
    check_grads(piecewise, [neg])


def series_exp(x):
    """A series truncated when its term is small (HIPS autograd's Taylor-series example)."""
    total, term, k = 0.0, 1.0, 0
    while np.abs(term) > 1e-10:
        total = total + term
        k += 1
        term = term * x / k
    return total


def fixed_point(a):
    """A fixed-point iteration that stops on convergence."""
    x = 1.0
    for _ in range(200):
        nxt = np.cos(a * x)
        if np.abs(nxt - x) < 1e-12:
            break
        x = nxt
    return x


def fixed_point_vector(a):
    """The same on a vector, stopping where np.allclose says (a traced bool: guarded)."""
    x = np.ones(2)
    for _ in range(200):
        nxt = np.cos(a * x[::-1])
        if np.allclose(nxt, x, rtol=0.0, atol=1e-12):
            break
        x = nxt
    return np.sum(x)


@pytest.mark.parametrize("fn, points", [(series_exp, (0.5, 1.5)), (fixed_point, (0.7, 0.9)),
                                        (fixed_point_vector, (0.7, 0.9))])
def test_while_and_break_on_data(fn, points):
    g = tj.grad(fn)
    for p in points:
        np.testing.assert_allclose(tj.jit(fn)(p), fn(p), rtol=1e-13)
        check_grads(fn, [p], rtol=1e-6)
        g(p)
    assert g.cache_info()["programs"] == 2


def minibatch_loss(w, step, data=np.arange(12.0)):
    i = step % 3                          # HIPS autograd's batch_indices(iter)
    return np.sum((w * data[4 * i:4 * i + 4]) ** 2)


def test_an_int_argument_that_slices_is_guarded_on_the_values_it_gives():
    g = tj.grad(minibatch_loss)
    w = np.array([1.5, -0.5, 2.0, 1.0])
    for step in range(7):
        i = step % 3
        np.testing.assert_allclose(g(w, step), 2 * w * np.arange(4.0 * i, 4.0 * i + 4) ** 2)
    # `data` (a default argument) is a Constant while traced: one program slices every batch
    assert g.cache_info()["programs"] == 1
    assert type(minibatch_loss.__defaults__[0]) is np.ndarray      # put back


def test_range_flags_and_ints_in_a_pytree():
    def h(x, n, opts):
        for _ in range(n):
            x = np.sin(x)
        return np.sum(x * opts[1] if opts[0] else x)
    x = np.array([0.5, 1.0, -2.0])
    f = tj.jit(h)
    for n, opts in ((3, (True, 2.0)), (2, (False, 2.0)), (3, (True, 3.0))):
        np.testing.assert_allclose(f(x, n, opts), h(x, n, opts))
    assert f.cache_info()["programs"] == 2       # the factor 3.0 is a run-time value
    np.testing.assert_allclose(tj.grad(h)(x, 1, (True, 2.0)), 2 * np.cos(x))


def test_numbers_used_only_in_arithmetic_stay_traced():
    g = tj.grad(lambda x, lr, k: np.sum(x * lr * k))
    for lr, k in ((0.1, 1), (0.2, 2), (0.3, 3)):
        np.testing.assert_allclose(g(np.ones(3), lr, k), np.full(3, lr * k))
    assert g.cache_info()["traces"] == 1


def test_int_of_data_and_an_outside_table_indexed_by_a_traced_int():
    table = np.arange(6.0).reshape(3, 2)         # made outside the function
    def f(x):
        return np.sum(table[np.argmax(x)] * x[:2]) + x[2] * int(x[2])
    for x in (np.array([0.1, 2.0, 1.5]), np.array([3.0, 0.2, 2.5])):
        np.testing.assert_allclose(tj.jit(f)(x), f(x))
        want = np.concatenate([table[np.argmax(x)], [int(x[2])]])
        np.testing.assert_allclose(tj.grad(f)(x), want)


def test_bincount_of_traced_labels_is_guarded_on_their_range():
    """np.bincount's length is max(labels) + 1, a value of the call: one program while the
    range holds, another where it grows; negative labels are numpy's error."""
    def per_class(w, labels):
        return np.sum(np.bincount(labels, weights=w) ** 2)
    w = np.array([0.5, -1.0, 2.0, 1.5])
    g = tj.grad(per_class)
    for labels in ([0, 1, 1, 2], [2, 0, 1, 0], [0, 3, 3, 1]):
        labels = np.array(labels)
        np.testing.assert_allclose(g(w, labels), 2 * np.bincount(labels, weights=w)[labels])
    assert g.cache_info()["programs"] == 2
    with pytest.raises(tj.ArgumentError, match="no negative elements"):
        g(w, np.array([0, -1, 1, 2]))
    counts = tj.jit(lambda x: np.bincount((np.abs(x) * 2).astype(int)))   # traced labels
    for x in (w, w[::-1] * 2):
        np.testing.assert_array_equal(counts(x), np.bincount((np.abs(x) * 2).astype(int)))


def test_digitize_in_traced_bins_is_guarded_on_their_direction():
    """Whether traced bins increase or decrease is a value of the call (numpy's monotonicity
    check): a program for each direction; bins that do neither are numpy's error."""
    def f(x, bins):
        return np.digitize(x, bins) * x
    x = np.array([-2.0, 0.3, 0.0, 1.7, 3.0])
    g = tj.jit(f)
    for bins in ([-1.0, 0.0, 1.0], [2.0, 0.3, -1.0], [-1.0, 0.5, 2.0], [0.0, 0.0, 0.0]):
        np.testing.assert_allclose(g(x, np.array(bins)), f(x, np.array(bins)))
    assert g.cache_info()["programs"] == 2
    with pytest.raises(tj.ArgumentError, match="monotonically increasing or decreasing"):
        g(x, np.array([0.0, 2.0, 1.0]))


def test_round_as_on_numpys_scalars():
    """round(x, n) is np.round (traced, zero derivative); round(x) is the int it rounds to,
    guarded like int() (half to even, as Python's round of a numpy float); a format spec
    (f"{loss:.3f}") needs the number: a clear error at the user's line."""
    def f(x, n):
        return np.sum(x[:round(n)] * round(x[1], 1))
    x = np.array([0.31, 0.56, 0.9])
    g = tj.jit(f)
    for n in (1.6, 2.4, 0.6, 2.5):
        np.testing.assert_allclose(g(x, n), f(x, n))
        want = np.zeros(3)
        want[:round(n)] = round(x[1], 1)          # round's own derivative is zero
        np.testing.assert_allclose(tj.grad(f)(x, n), want)
    assert g.cache_info()["programs"] == 2          # round(n) gave 2 and 1
    with pytest.raises(tj.ConcretizationError, match="format spec '.3f'") as err:
        tj.jit(lambda x: print(f"{x[0]:.3f}") or x)(x)
    assert "test_guards.py" in str(err.value)
    seen: list[str] = []
    tj.jit(lambda x: seen.append(f"{x}") or x)(x)   # no spec: its repr, as print(x) gives
    assert seen == ["Tracer<f64[3]:x>"], seen


def test_a_traced_float_read_as_a_number_is_refused():
    with pytest.raises(tj.ConcretizationError, match="drop its derivative") as err:
        tj.grad(lambda x: float(x) * x)(2.0)
    assert "test_guards.py" in str(err.value)
    with pytest.raises(tj.ConcretizationError, match="drop its derivative"):
        tj.grad(lambda x: x[0].item() * np.sum(x))(np.ones(2))


def test_a_nested_transform_guards_the_enclosing_program():
    def inner(x, n):
        if np.sum(x) > 0:
            return np.sum(x[:n] ** 2)
        return np.sum(x)
    outer = tj.jit(lambda x, n: tj.grad(inner)(x, n) * 2.0)
    for x, n in (([1.0, 2.0, 3.0], 2), ([1.0, 2.0, 3.0], 3), ([-1.0, -2.0, -3.0], 3)):
        x = np.array(x)
        np.testing.assert_allclose(outer(x, n), 2 * tj.grad(inner)(x, n))
    np.testing.assert_allclose(tj.hessian(lambda x, n: np.sum(x[:n] ** 3))(np.ones(3), 2),
                               np.diag([6.0, 6.0, 0.0]))


def test_what_cannot_be_guarded_keeps_the_error():
    with pytest.raises(tj.ConcretizationError, match="tj.vmap on a per-example value"):
        tj.vmap(lambda x: x * 2.0 if x[0] > 0 else x)(np.ones((2, 3)))
    np.testing.assert_allclose(tj.vmap(lambda x, n: x[:n], in_axes=(0, None))(np.ones((2, 3)), 2),
                               np.ones((2, 2)))
    with pytest.raises(tj.ConcretizationError, match="per-step value"):
        tj.jit(lambda x: tj.fori_loop(0, 3, lambda i, c: c * 2 if c > 0 else c, x))(1.0)


def test_past_max_variants_the_error_names_the_fix(monkeypatch):
    monkeypatch.setattr(variants, "MAX_VARIANTS", 3)
    f = tj.jit(lambda x: x * int(x))
    for v in (1.0, 2.0, 3.0):
        assert f(v) == v * v
    with pytest.raises(tj.ConcretizationError, match="changed 3 times.*np.where or tj.cond"):
        f(4.0)


def test_strict_mode_keeps_jax_rule(monkeypatch):
    monkeypatch.setenv("TAPEJIT_STRICT", "1")
    config.reload()
    try:
        with pytest.raises(tj.ConcretizationError, match="TAPEJIT_STRICT=1"):
            tj.grad(piecewise)(np.ones(3))
    finally:
        monkeypatch.delenv("TAPEJIT_STRICT")
        config.reload()


def test_a_long_guarded_loop_applies_each_traced_op_once(monkeypatch):
    """Each value a guard asks for is computed from the values asked for before (interpret.
    Growing): ops applied while tracing grow with the loop's length, not with its square."""
    from tapejit import interpret
    applied = []
    apply_impl = interpret.apply_impl
    monkeypatch.setattr(interpret, "apply_impl", lambda e, ins: applied.append(e.op) or
                        apply_impl(e, ins))

    def grow(x, n):
        s = x
        while np.sum(s) < n:
            s = s * 1.5 + 0.25
        return np.sum(s)

    def steps(n):
        s, k = np.ones(3), 0
        while np.sum(s) < n:
            s, k = s * 1.5 + 0.25, k + 1
        return k

    counts = {}
    for n in (1e3, 1e6):
        sharing.forget()              # a new transform's own programs: no guards to try first
        applied.clear()
        x = np.ones(3)
        assert tj.jit(grow, backend="interpret")(x, n) == pytest.approx(grow(x, n), rel=1e-14)
        counts[n] = len(applied)
    assert steps(1e6) > 2 * steps(1e3)
    # the ops of each step are applied once while tracing (and once more by the call itself):
    # linear in the steps, where evaluating each guard from the start was quadratic
    assert counts[1e6] / counts[1e3] < 1.2 * steps(1e6) / steps(1e3)


def test_a_guarded_loop_inside_an_enclosing_trace_binds_each_op_once(monkeypatch):
    """A transform traced inside another's trace (grad of grad) gets its guards' values from
    the enclosing trace (interpret.Growing, inlined): each traced op is bound into it once,
    not once per guard, so the binds grow with the loop's length, not with its square."""
    from tapejit import interpret
    bound = []
    bind = interpret._apply_bind
    monkeypatch.setattr(interpret, "_apply_bind", lambda e, ins: bound.append(e.op) or
                        bind(e, ins))

    def step(x, a):              # sqrt(a) is the fixed point
        return x - 0.05 * (x * x - a)

    def root(tol):
        def fixed_point(a):
            x, previous = step(a * 0.0 + 10.0, a), a * 0.0 + 10.0
            while np.abs(x - previous) > tol:
                x, previous = step(x, a), x
            return x
        return fixed_point

    def unrolled(steps):          # the same steps, counted in Python: no guards
        def fixed_point(a):
            x = a * 0.0 + 10.0
            for _ in range(steps):
                x = step(x, a)
            return x
        return fixed_point

    counts = {}
    for tol in (1e-4, 1e-8):
        bound.clear()
        second = tj.grad(tj.grad(root(tol)))(2.0)
        counts[tol] = len(bound)
        x, previous, steps = step(10.0, 2.0), 10.0, 1
        while abs(x - previous) > tol:
            x, previous, steps = step(x, 2.0), x, steps + 1
        np.testing.assert_allclose(second, tj.grad(tj.grad(unrolled(steps)))(2.0), rtol=1e-12)
    # twice the steps (linear convergence): about twice the binds, where quadratic gave four
    assert 1.5 < counts[1e-8] / counts[1e-4] < 2.5, counts


def test_the_variant_taken_last_is_tried_first(monkeypatch):
    """Calls in a row tend to take the same branches: a call runs the guards of the variant
    the last call took first, so a run of calls checks one variant's guards each."""
    checked = []
    interpret = variants.interpret
    monkeypatch.setattr(variants, "interpret", lambda tape, leaves: checked.append(1) or
                        interpret(tape, leaves))
    def doubled(x):
        while x < 10.0:
            x = x * 2.0
        return x
    f = tj.jit(doubled)
    for v in (1.0, 3.0, 6.0):         # 4, 2, 1 doublings: three guard tapes
        assert f(v) == doubled(v)
    checked.clear()
    for _ in range(5):
        assert f(3.0) == 12.0
    assert len(checked) == 6          # the first call tries 6.0's guards, then 3.0's


def minibatch_of(w, data, step):
    i = step % 3
    return np.sum((w * data[4 * i:4 * i + 4, 1]) ** 2) + np.sum(data[None, 2 * i:2 * i + 3, :2])


def test_a_traced_slice_of_fixed_length_is_one_program_for_every_start():
    g = tj.grad(minibatch_of, argnums=(0, 1))
    w, data = np.array([1.5, -0.5, 2.0, 1.0]), np.arange(36.0).reshape(12, 3)
    for step in range(6):
        i = step % 3
        dw, ddata = g(w, data, step)
        np.testing.assert_allclose(dw, 2 * w * data[4 * i:4 * i + 4, 1] ** 2)
        want = np.zeros_like(data)
        want[4 * i:4 * i + 4, 1] = 2 * w ** 2 * data[4 * i:4 * i + 4, 1]
        want[2 * i:2 * i + 3, :2] += 1.0
        np.testing.assert_allclose(ddata, want)
        check_grads(lambda w, d: minibatch_of(w, d, step), [w, data])
    info = g.cache_info()
    assert info["programs"] == 1 and info["traces"] == 1        # not one per batch


def test_a_traced_slice_past_the_axis_is_guarded_on_its_values():
    f = tj.jit(lambda x, i: np.sum(x[i:i + 3]))
    x = np.arange(5.0)
    for i in (0, 1, 3, 4, 3):                    # numpy clips x[3:6] and x[4:7]
        assert f(x, i) == np.sum(x[i:i + 3])
    assert f.cache_info()["programs"] == 3       # in-range starts share one


TRAIN = np.arange(48.0).reshape(16, 3)           # a module's data, as HIPS autograd's examples
GRID = np.linspace(0.0, 1.0, 8)


def neural_net_objective(w, step):
    i = step % 4
    return np.sum((TRAIN[i * 4:(i + 1) * 4] @ w) ** 2)


def advect(x):
    """fluidsim's semi-Lagrangian lookup: a table from outside at computed integer indices."""
    cell = np.floor(x * 7.0).astype(int) % 8
    return np.sum(GRID[cell] * x)


def test_arrays_from_outside_index_and_slice_by_traced_values():
    g = tj.grad(neural_net_objective)
    w = np.array([0.5, -1.0, 0.25])
    for step in range(6):
        i = step % 4
        batch = TRAIN[i * 4:(i + 1) * 4]
        np.testing.assert_allclose(g(w, step), 2 * batch.T @ (batch @ w))
    assert g.cache_info()["programs"] == 1 and type(TRAIN) is np.ndarray
    x = np.array([0.05, 0.4, 0.93, 0.6])
    np.testing.assert_allclose(tj.jit(advect)(x), advect(x))
    np.testing.assert_allclose(tj.grad(advect)(x), GRID[np.floor(x * 7.0).astype(int) % 8])
    assert type(GRID) is np.ndarray


def test_outside_arrays_are_put_back_when_tracing_fails():
    def broken(x):
        return np.sum(TRAIN[: int(np.sum(x) > 0)] * x[0]) + undefined_name  # noqa: F821

    with pytest.raises(NameError):
        tj.jit(broken)(np.ones(3))
    assert type(TRAIN) is np.ndarray


class _Scaled:
    def __init__(self):
        self.scale = np.array([2.0, 3.0])

    def loss(self, x):
        return np.sum(self.scale * x ** 2)


def test_what_a_transformed_function_reads_by_name():
    """A bound method reads its object's attributes; a numpy function transformed directly
    reads nothing by name (a builtin's `__self__` is its module: walking numpy's namespace
    took 50 ms a trace)."""
    from tapejit import guards
    model = _Scaled()
    read = {name for name, _, _ in guards._by_name(model.loss, set())}
    assert "self.scale" in read
    assert list(guards._by_name(np.dot, set())) == []
    a, b = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    np.testing.assert_allclose(tj.grad(np.dot)(a, b), b)
    np.testing.assert_allclose(tj.grad(model.loss)(a), 2 * model.scale * a)


def test_retraces_on_branch_values_warn_with_the_fix_for_branches():
    def scaled(x):
        return x[1] * int(x[0])

    jitted = tj.jit(scaled)
    with pytest.warns(tj.TapejitWarning) as caught:
        for k in range(11):
            assert jitted(np.array([k, 2.0])) == 2.0 * k
    said = [str(w.message) for w in caught if "was traced" in str(w.message)]
    assert len(said) == 1 and "branched on" in said[0] and "tj.cond" in said[0]
    assert "pad batches" not in said[0]
