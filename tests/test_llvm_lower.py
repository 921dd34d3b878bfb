"""tapejit's own LLVM lowering of the generated module (codegen/llvm/lower.py) on programs
users write: each runs compiled from its first call, its program is the lowering's
(`Compiled.codegen == "llvm"`), and every call equals the interpreter's (conftest.py's
TAPEJIT_VERIFY, and here exactly where the arithmetic is exact).

Covered: numba's scalar semantics where they are subtle (integer floor division and remainder
with negative operands and zero divisors, small and unsigned integers, float32 without a
float64 detour, NaN in comparisons, selects, maximum/minimum and clip, powers, casts), bool
arrays (bytes in memory), lengths that collide or vanish, parallel nests with reductions
under thread budgets 1, 2 and 3, outputs that are inputs or views of them, fresh outputs per
call, index checks, control flow and the buffers its carries trade, and the numba fallback
(what the lowering does not cover, `TAPEJIT_CODEGEN=numba`). What LLVM's vectoriser needs is
checked in the optimised IR: partial sums, max/min reductions and strided chunks vectorise
without run-time overlap checks (alias scopes), and arrays that overlap stay correct. The numba generator agrees bit
for bit; where both differ from numpy (signs of zero results, float floor division by
infinity, int64 min // -1), the tests say so.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

import tapejit as tj
from tapejit import compile as compile_module
from tapejit import config
from tapejit.codegen.cpu import generate
from tapejit.codegen.llvm import jit
from tapejit.codegen.llvm.emit import NotCovered
from tapejit.codegen.llvm import lower as lowering
from tapejit.codegen.llvm.lower import Lowered, lower
from tapejit.compile import Compiled
from tapejit.passes import fused
from hang import HANG_S


def runners(transform) -> list[Compiled]:
    """The compiled programs a transform holds (one per argument signature)."""
    transform = getattr(transform, "__wrapped_transform__", transform)
    programs = [p.run for p in transform._cache.values()]
    assert programs and all(isinstance(p, Compiled) for p in programs)
    return programs


def identical(got, want, zeros: bool = True) -> None:
    """Same dtype, shape and values (NaN where NaN), and the sign of zeros unless `zeros` is
    False."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), (got, want)
    if want.dtype.kind == "f" and zeros:
        assert np.array_equal(np.signbit(got), np.signbit(want)), (got, want)


def check(fn, *calls, codegen: str = "llvm", exact: bool = True, zeros: bool = True,
          transform=tj.jit) -> list:
    """Run `fn` compiled and interpreted on each argument tuple in `calls` (the first call
    compiles, the later ones run the same program): equal outputs (`exact`: `identical`, else
    within 4 ulp), no call interpreted, and each program made by `codegen`. Returns the
    compiled outputs."""
    compiled, interpreted = transform(fn), transform(fn, backend="interpret")
    results = []
    for args in calls:
        got, want = compiled(*args), interpreted(*args)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if exact:
                identical(g, w, zeros)
            else:
                tol = 4 * np.finfo(w.dtype).eps if w.dtype.kind == "f" else 0
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
        results.append(got)
    info = compiled.cache_info()
    assert info["interpreted"] == 0 and info["codegen"][codegen] == info["programs"] > 0
    return results


@pytest.fixture
def settings(monkeypatch):
    """Set TAPEJIT_* variables for one test: `settings(PARALLEL_MIN_SIZE="4")`."""
    def apply(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(f"TAPEJIT_{name}", value)
        config.reload()
    yield apply
    monkeypatch.undo()
    config.reload()


# ---- integers -----------------------------------------------------------------------------
A = np.array([7, -7, 7, -7, 0, 5, -5, 6, -6, 1])
B = np.array([2, 2, -2, -2, 3, 0, 0, -4, 4, -1])


def floor_ops(a, b):
    return a // b, a % b, np.floor_divide(a, 3), np.remainder(-a, 4)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_integer_floor_division_rounds_down_and_a_zero_divisor_gives_zero(dtype):
    a, b = A.astype(dtype), B.astype(dtype)       # uint8: -7 wraps to 249
    out = check(floor_ops, (a, b), (b, a))
    with np.errstate(all="ignore"):
        for got, want in zip(out[0], floor_ops(a, b)):
            identical(got, want)


INT64_MIN_BY_MINUS_ONE = textwrap.dedent("""
    import numpy as np, tapejit as tj
    f = tj.jit(lambda a, b: (a // b, a % b))
    print(*(o.tolist() for o in f(np.array([-2**63, 7]), np.array([-1, 2]))))
""")


def test_int64_min_floor_divided_by_minus_one_is_numpys():
    """The lowering divides integers itself (numba's floor_divide traps here: SIGFPE on
    TAPEJIT_CODEGEN=numba)."""
    out = _child(INT64_MIN_BY_MINUS_ONE)
    assert out.returncode == 0 and out.stdout.split() == ["[-9223372036854775808,", "3]",
                                                          "[0,", "1]"], out.stderr[-500:]


def small_int_ops(a, b):
    return a + b, a - b, a * b, -a, np.abs(a), a < b, a >= b, a == b, a + 1, a * 3 - 2


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int16, np.uint8, np.uint16,
                                   np.uint32])
def test_small_integers_wrap_as_numpys(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max, 5, 0, info.min + 1], dtype)
    b = np.array([1, -1 if info.min else 1, info.max, 3, 0, 7], dtype)
    check(small_int_ops, (a, b), (b, a))


def test_signed_against_unsigned_compares_by_value():
    u = np.array([250, 3, 0, 128, 255, 1], np.uint8)
    i = np.array([127, -128, 5, -5, 0, 1], np.int8)
    out = check(lambda u, i: (u < i, u == i, u + i, u.astype(np.int64) - i), (u, i))
    identical(out[0][0], u < i)


def test_integer_powers():
    base = np.array([2, 3, -2, 0, -1, 7, 1])
    exponent = np.array([3, 0, 5, 0, 7, 2, 60])
    x = np.array([1.5, -2.0, 0.0, -0.0, np.nan, np.inf, 1e-3])
    check(lambda b, e, x: (b ** e, b ** 2, b ** 3, x ** 2), (base, exponent, x))
    check(lambda x: x ** 2, (x.astype(np.float32),))
    # a float power is a math kernel (within an ulp of numpy's; float32 computed in float64)
    for dtype in (np.float64, np.float32):
        check(lambda e, x: (x ** 3, x ** -1, x ** e, x ** 0.5), (exponent, x.astype(dtype)),
              exact=False)


# ---- floats -------------------------------------------------------------------------------
def float32_arithmetic(x, y):
    z = x * y + x / y - np.sqrt(np.abs(x)) * 0.1     # a weak Python scalar keeps float32
    return z, x - y * 3.0, (x + 1.0) * (y - 2.0) / 7.0


def test_float32_arithmetic_rounds_each_step_in_float32():
    """Every step is rounded to float32 as numpy rounds it (no float64 detour: the IR has no
    conversion to double), bit for bit."""
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(37).astype(np.float32) for _ in range(2))
    check(float32_arithmetic, (x, y), (y, x))
    jitted = tj.jit(float32_arithmetic)
    for got, want in zip(jitted(x, y), float32_arithmetic(x, y)):
        identical(got, want)
    assert "fpext" not in runners(jitted)[0].program.lowered.ir


EDGES = np.array([1.5, -2.25, np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -7.5, 3.0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nan_compares_unequal_to_everything(dtype):
    x = EDGES.astype(dtype)
    y = np.roll(x, 3)
    out = check(lambda x, y: (x != x, x == x, x < y, x <= y, x > y, x >= y, x != y, x == y,
                              x > np.nan, x != np.nan), (x, y))
    identical(out[0][0], np.isnan(x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_maximum_minimum_clip_abs_and_sign_of_nan(dtype):
    """NaN wins on either side. The sign of a zero result is numba's (np.sign(-0.0) is -0.0,
    maximum(-0.0, 0.0) the first), not numpy's; test_same_bits_as_the_numba_generator checks
    that the lowering keeps numba's."""
    x = EDGES.astype(dtype)
    y = np.roll(x, 2)           # NaN against a number on either side, and NaN against NaN
    check(lambda x, y: (np.maximum(x, y), np.minimum(x, y), np.clip(x, -1.0, 1.0),
                        np.abs(x), np.sign(x), np.maximum(x, 0.0), np.minimum(0.0, x)),
          (x, y), (y, x), zeros=False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_and_min_reductions_vectorise_and_nan_wins(dtype):
    """`acc = np.maximum(acc, x)` is lowered to LLVM's llvm.maximum, which its vectoriser knows
    for a reduction (numba's compares and selects it did not): a NaN anywhere in a row (first,
    last, in the vector body or its remainder) is that row's max and min; infinities and rows of
    one element too. (Of zeros of both signs the result's sign is unspecified, as in numpy.)"""
    x = np.random.default_rng(10).standard_normal((9, 37)).astype(dtype)
    for row, col in ((1, 0), (2, 36), (3, 17), (4, 33), (5, 1)):
        x[row, col] = np.nan
    x[6, :] = np.inf
    x[7, 5], x[8, :] = -np.inf, np.nan
    check(lambda x: (np.max(x, axis=1), np.min(x, axis=1), np.max(x), np.min(x[:, :1], axis=1)),
          (x,), (x[::-1].copy(),), zeros=False)
    f = tj.jit(lambda x: np.max(x, axis=1))
    f(x)
    program, = runners(f)
    assert "@llvm.maximum" in lowered(program).ir
    assert "vector.body" in optimised(lowered(program).ir)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_where_on_a_float_condition_takes_nan_as_true(dtype):
    x = EDGES.astype(dtype)
    out = check(lambda c, a: (np.where(c, a, -a), np.where(c > 0, c, np.nan), c.astype(bool),
                              np.where(np.isnan(c), 0.0, c)), (x, np.arange(10.0)))
    identical(out[0][2], x.astype(bool))


def test_float_floor_division_and_remainder_take_the_divisors_sign():
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, 1.0, -1.0, 5.0, -0.0, 1e300, -3.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 0.0, np.nan, -0.0, 1.0, 1e-300, 3.0])
    check(lambda a, b: (a // b, a % b), (a, b), (b, a), zeros=False)   # 3 % -3: numba's 0.0
    with np.errstate(over="ignore"):                     # 1e300 is inf in float32
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
    check(lambda a, b: (a // b, a % b), (a32, b32), zeros=False)


def test_float_floor_division_at_infinities_and_signed_zeros_is_numpys(settings):
    """numba's np.floor_divide gives -0.0 for -1 // inf and inf for inf // 3, its remainder
    0.0 for 0.0 % -3.0; numpy's divmod (codegen/special.py) gives -1.0, nan and -0.0."""
    a = np.array([-1.0, np.inf, 5.0, 1.0, 0.0, -0.0, 3.0, np.nan, -7.5])
    b = np.array([np.inf, 3.0, -np.inf, np.inf, -3.0, 2.0, 0.0, 1.0, 2.0])
    calls = [(a.astype(dtype), b.astype(dtype)) for dtype in (np.float64, np.float32)]
    check(lambda a, b: (a // b, a % b), *calls[:1])     # (check: signed zeros identical too)
    check(lambda a, b: (a // b, a % b), *calls[1:])
    settings(CODEGEN="numba")
    check(lambda a, b: (a // b, a % b), *calls[:1], codegen="numba")


def test_casts_truncate_toward_zero_wrap_and_test_nonzero():
    x = np.array([1.7, -1.7, 0.5, -0.5, 2.5, -0.0, 100.9, -128.2])
    i = np.array([0, 3, -1, 256, 300, -129, 2**40, 1])
    out = check(lambda x, i: (x.astype(np.int64), x.astype(np.int32), x.astype(np.float32),
                              i.astype(bool), i.astype(np.int8), i.astype(np.uint8),
                              i.astype(np.float32), x.astype(bool), (i > 0).astype(np.float64)),
                (x, i))
    identical(out[0][0], np.array([1, -1, 0, 0, 2, 0, 100, -128]))


def kernels(x, y, k):
    return (np.exp(x), np.log(np.abs(x)), np.tanh(y), np.sin(x) * np.cos(y), x ** y, x ** 3,
            x // y, x % y, np.maximum(x, y), np.minimum(x, 0.0), np.sign(x), np.sqrt(y),
            np.where(x > y, x, y), np.arctan2(x, y), x ** k, np.expm1(y), np.log1p(np.abs(y)))


def test_same_bits_as_the_numba_generator(settings):
    """The math kernels the lowering calls are numba's own code: the two generators agree
    bit for bit, signs of zeros included, in float64 and float32."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-3, 3, 40), [0.0, -0.0, np.nan, 1.0, -1.0]])
    y = np.concatenate([rng.uniform(-3, 3, 40), [-0.0, 0.0, 1.0, np.nan, 2.0]])
    k = np.arange(45) % 5 - 2
    cases = [(x, y, k), (x.astype(np.float32), y.astype(np.float32), k)]
    llvm = [check(kernels, args, exact=False)[0] for args in cases]
    settings(CODEGEN="numba")
    numba = [check(kernels, args, codegen="numba", exact=False)[0] for args in cases]
    for ours, theirs in zip(llvm, numba):
        for a, b in zip(ours, theirs):
            identical(a, b)


# ---- bool arrays ----------------------------------------------------------------------------
def test_bool_arrays_are_bytes_in_and_out():
    a = np.array([True, False, True, False, True])
    b = np.array([True, True, False, False, True])
    x = np.arange(5.0)
    out = check(lambda a, b, x: (a & b, a | b, a ^ b, ~a, a == b, np.where(a, x, -x),
                                 np.sum(a), x[a.astype(np.int64)], np.logical_not(a) & (x > 1)),
                (a, b, x), (b, a, x))
    for got in out[0]:
        if got.dtype == bool:           # one byte per element, 0 or 1
            assert set(got.view(np.uint8).tolist()) <= {0, 1}


# ---- lengths that collide or vanish ---------------------------------------------------------
def layer(w, b, x):
    return np.tanh(x @ w + b).sum(axis=0) / x.shape[0]


@pytest.mark.parametrize("n,m", [(3, 3), (0, 3), (3, 0), (1, 1), (1, 4), (4, 1)])
def test_lengths_that_are_equal_empty_or_one(n, m):
    rng = np.random.default_rng(n * 10 + m)
    w, b, x = rng.standard_normal((m, m)), rng.standard_normal(m), rng.standard_normal((n, m))
    check(layer, (w, b, x), (w, b, x + 1.0), exact=False)
    check(lambda x: (x.sum(axis=0), x.sum(axis=1, keepdims=True), x + x.mean(axis=0), x.T * 2),
          (x,), exact=False)


def mlp(w1, w2, x):
    return np.mean(np.tanh(np.tanh(x @ w1) @ w2) ** 2)


def test_mlp_gradient_with_batch_equal_to_width():
    """Square products in every layout (x @ w, its transposes in the gradient)."""
    rng = np.random.default_rng(1)
    w1, w2, x = (rng.standard_normal((6, 6)) / 3 for _ in range(3))
    check(mlp, (w1, w2, x), (w2, w1, x * 2), exact=False,
          transform=lambda f, **kw: tj.grad(f, argnums=(0, 1), **kw))
    check(lambda a: (a @ a, a.T @ a, a @ a.T, a.T @ a.T), (x,), exact=False)


# ---- parallel nests -------------------------------------------------------------------------
def reductions(x, y):
    d = x[:, None, :] - y[None, :, :]
    return np.sum(d * d, axis=0), np.sum(np.sin(x)), np.sum(x * 2.0, axis=1)


@pytest.mark.parametrize("budget", ["1", "2"])
def test_parallel_reductions_into_a_scalar_and_an_array(settings, budget):
    settings(PARALLEL_MIN_SIZE="4", NUM_THREADS=budget)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((40, 3)), rng.standard_normal((5, 3))
    jitted = tj.jit(reductions)
    first, later = jitted(x, y), jitted(x, y)
    for got, again, want in zip(first, later, reductions(x, y)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
        identical(again, got)         # the partial sums are added in chunk order
    program, = runners(jitted)
    assert program.codegen == "llvm" and "numba.prange" in program.source
    assert program.sizes[program.threads_slot] == min(int(budget), tj.get_num_threads())
    check(reductions, (x, y), (x[:2], y), exact=False)      # fewer rows than threads


def test_parallel_nests_of_integers_float32_and_checked_indices(settings):
    settings(PARALLEL_MIN_SIZE="4", NUM_THREADS="2")
    rng = np.random.default_rng(4)
    x, i = rng.standard_normal((64, 8)), rng.integers(-64, 64, 200)
    check(lambda x: (np.sum(x > 0), np.sum(x > 0, axis=0), np.sum(x * x, axis=0), x.mean(1)),
          (x,), (x.astype(np.float32),), exact=False)
    gather = tj.grad(lambda x, i: np.sum(np.sin(x[i])))
    check(lambda x, i: np.sum(np.sin(x[i])), (x, i), exact=False, transform=tj.grad)
    bad = i.copy()
    bad[150] = 64
    for call in range(2):          # an index out of range in one chunk of the parallel nest
        with pytest.raises(tj.IndexOutOfBoundsError, match="index 64 is out of bounds"):
            gather(x, bad)
        gather(x, i)
    program, = runners(gather)
    assert program.codegen == "llvm" and "numba.prange" in program.source


THREE_THREADS = textwrap.dedent("""
    import numba  # before the first call: its pool is there, every call gets the budget
    import numpy as np, tapejit as tj
    from tapejit import config
    def reductions(x, y):
        d = x[:, None, :] - y[None, :, :]
        return np.sum(d * d, axis=0), np.sum(np.sin(x)), np.sum(x * 2.0, axis=1)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((40, 3)), rng.standard_normal((5, 3))
    for rows in (40, 2, 1):         # 2 and 1: more threads than rows
        f = tj.jit(reductions)
        for call in range(2):
            for got, want in zip(f(x[:rows], y), reductions(x[:rows], y)):
                np.testing.assert_allclose(got, want, rtol=1e-12)
        p = list(f._cache.values())[-1].run     # this size's (the transforms share them)
        assert p.codegen == "llvm" and "numba.prange" in p.source, p.source
        print(rows, p.sizes[p.threads_slot])
""")


def test_parallel_reductions_on_three_threads():
    """A pool of 4 threads, a budget of 3 (a new process: the pool's size is fixed when numba
    starts it)."""
    out = _child(THREE_THREADS, NUMBA_NUM_THREADS="4", TAPEJIT_NUM_THREADS="3",
                 TAPEJIT_PARALLEL_MIN_SIZE="2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == ["40 3", "2 3", "1 3"], out.stdout


def _child(source: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "TAPEJIT_FIRST_CALL": "compile", "TAPEJIT_VERIFY": "1", **env}
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          env=environ, timeout=HANG_S)


# ---- what LLVM's vectoriser sees -----------------------------------------------------------
def lowered(program: Compiled) -> Lowered:
    """A compiled program's module, lowered again (one loaded from disk keeps no IR)."""
    return lower(*compile_module.lowering(program.tape, generate(fused(program.tape)))[0])


def optimised(ir: str) -> str:
    """LLVM IR text `ir`, optimised as jit.py optimises programs (no kernels linked in)."""
    module = jit.parse(ir, llvm.create_context())
    module.triple, module.data_layout = jit.target_machine().triple, \
        str(jit.target_machine().target_data)
    jit.optimise(module)
    return str(module)


def optimised_nests(program: Compiled) -> list[str]:
    """The optimised IR of each parallel loop's chunk function of a lowered program."""
    return [optimised(part) for part in lowered(program).parts[1:]]


def test_chunk_partial_sums_vectorise_without_overlap_checks(settings):
    """Per-chunk partial sums are stored at `[c, i * n + j]`: an index known to be
    non-negative (no wrap-around test hiding its stride, which made the loop 'cannot identify
    array bounds'), into a buffer whose alias scope is not the input's (no run-time overlap
    checks: a loop of 10 iterations stayed scalar behind them)."""
    settings(PARALLEL_MIN_SIZE="4", NUM_THREADS="2")
    x = np.random.default_rng(8).standard_normal((16, 10, 36))
    f = tj.jit(lambda x: np.sum(x * 2.0, axis=0))
    for args in (x, x, x[:3, :1, :1]):       # the first call, a later one, other lengths
        np.testing.assert_allclose(f(args), np.sum(args * 2.0, axis=0), rtol=1e-12)
    for shape in ((16, 0, 36), (16, 1, 1), (1, 10, 36), (3, 10, 1)):    # empty and size-1 axes
        y = np.arange(float(np.prod(shape))).reshape(shape)
        np.testing.assert_allclose(f(y), np.sum(y * 2.0, axis=0), rtol=1e-12)
    program = runners(f)[0]
    assert "_p[i0_0c, i1_0 * S[" in program.source    # the partials, at [c, i * n + j]
    nest = optimised_nests(program)[0]
    assert "vector.body" in nest and "found.conflict" not in nest, nest   # no overlap checks


@pytest.mark.skipif(not jit.host()[0] or "avx" not in jit.host()[1],
                    reason="gather and scatter features are x86's")
def test_loops_without_math_kernels_compile_without_gathers_where_they_are_slow(
        settings, monkeypatch):
    """Where the host's gathers and scatters are slow (`lower.strided_features`: AMD's Zen),
    every function of a program that calls no math kernel carries the host's features and
    `+prefer-no-gather,+prefer-no-scatter` (its strided loads and stores run as scalar or
    shuffled code); no function of one calling a kernel, whose table lookups gather, does
    (LLVM inlines a function only into one of the same features). Both compute what the
    interpreter does."""
    settings(PARALLEL_MIN_SIZE="4", NUM_THREADS="2")
    features = jit.host()[1] + ",+prefer-no-gather,+prefer-no-scatter"
    monkeypatch.setattr(lowering, "strided_features", lambda: features)
    x = np.random.default_rng(10).standard_normal((30, 3))
    pairs = lambda x: np.sum((x[:, None, :] - x[None, :, :]) * (x[:, None, :] + 0.375), axis=1)
    smooth = lambda x: np.sum(np.exp(x[:, None, :] - x[None, :, :] * 0.625), axis=1)
    marked = f'"target-features"="{features}"'
    heads = {}
    for name, fn, want in (("pairs", pairs, ((x[:, None] - x[None]) * (x[:, None] + 0.375)).sum(1)),
                           ("smooth", smooth, np.exp(x[:, None] - x[None] * 0.625).sum(1))):
        f = tj.jit(fn)
        for _ in range(2):
            np.testing.assert_allclose(f(x), want, rtol=1e-13)
        heads[name] = lowered(runners(f)[0]).ir.split("\ndefine ")[1:]
    assert all(marked in f.split("\n")[0] for f in heads["pairs"]), heads["pairs"]
    smooth_ir = heads["smooth"]
    calling = [f for f in smooth_ir if "call double @tj_lib_" in f]
    assert calling and all(marked not in f.split("\n")[0] for f in calling), smooth_ir
    assert all(marked not in f.split("\n")[0] for f in smooth_ir), smooth_ir


def test_a_chunk_reads_lengths_from_the_size_table(settings):
    """A chunk reads the lengths of the arrays it is passed from its own size table, where its
    loops' bounds come from: arrays of equal lengths have one stride there, and the loop's
    bound is seen to be their length (one induction variable for them all). Its context holds
    the size table's address and the four data pointers."""
    settings(PARALLEL_MIN_SIZE="4", NUM_THREADS="2")
    rng = np.random.default_rng(9)
    a, b, c = (rng.standard_normal((12, 37)) for _ in range(3))
    f = tj.jit(lambda a, b, c: np.exp(a) * b + c)
    check(lambda a, b, c: np.exp(a) * b + c, (a, b, c), exact=False)
    f(a, b, c)
    program, = runners(f)
    nest = lowered(program).parts[1]
    assert nest.count("getelementptr i64, ptr %ctx") == 1 + 4, nest


def test_arrays_that_overlap_keep_their_order():
    """Alias scopes claim nothing about arrays a function is given: the same array passed
    twice, an output that is an input, a carry that takes a frame's buffer, and buffers
    reused in place all give the interpreter's answers."""
    x = np.linspace(-2.0, 2.0, 24).reshape(4, 6)
    check(lambda a, b: (a * 2.0 + b[::-1], np.sum(a * b, axis=0), a), (x, x), (x, x[::-1]),
          exact=False)
    check(lambda x: tj.fori_loop(0, 3, lambda k, c: c[::-1] * 0.5 + c, x * 3.0), (x,),
          exact=False)
    check(lambda x: np.sum(np.exp(np.exp(np.sin(x) * 2.0) - 1.0) * x), (x,), exact=False,
          transform=tj.grad)


# ---- outputs --------------------------------------------------------------------------------
def test_an_output_that_is_an_input_or_a_reshape_of_one():
    x, y = np.arange(6.0), np.arange(6.0, 12.0)
    out = check(lambda x: x, (x,), (y,))
    assert out[0][0] is not x and out[1][0] is not y      # the caller's own arrays (a copy)
    check(lambda x: (x.reshape(2, 3), x, x * 2), (x,), (y,))
    check(lambda x, y: (y, x.reshape(3, 2).T), (x, y))
    check(lambda x: ((x * 2).reshape(3, 2), np.sum(x).reshape(1), (x + 1)[None, :, None],
                     tj.fori_loop(0, 2, lambda k, c: c + 1.0, x).reshape(2, 3)), (x,), (y,))


def test_views_and_scalars_as_arguments():
    """The trampoline reads data pointers: transposed, strided and reversed views are copied
    to C order first, and Python and numpy scalars become 0-d arrays."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 8))
    check(lambda a, b, s, k: (a @ b[:, ::2] * s + k, a.sum(axis=0)),
          (a, b, 2.0, 3), (a.T, b, np.float64(0.5), np.int64(-1)),
          (a[::-1], b[::-1], np.array(1.5), 2), exact=False)


def test_each_call_returns_fresh_outputs():
    f = tj.jit(lambda x: (x * 2, np.sum(x), np.cumsum(x)))
    x = np.arange(5.0)
    kept = [o.copy() for o in f(x)]
    first = f(x)
    second = f(x + 10)
    for a, b, k in zip(first, second, kept):
        assert not np.shares_memory(a, b)
        identical(a, k)              # a later call did not write into an earlier output
    assert runners(f)[0].codegen == "llvm"


def test_two_lengths_share_one_loaded_code():
    """The IR has no lengths: a program for new lengths loads nothing and compiles nothing."""
    f = tj.jit(lambda x: np.exp(x) * 2.0 - x)
    f(np.ones(3))
    f(np.ones(11))
    first, second = runners(f)
    assert first.program.modname == second.program.modname
    assert (second.program.compiles, second.program.disk_loads) == (0, 0)


# ---- index checks ---------------------------------------------------------------------------
def gather(x, i):
    return x[i] * 2.0, np.sum(x[i, None] * x)


def test_an_index_out_of_range_raises_on_every_call():
    x = np.arange(4.0)
    f = tj.jit(gather)
    with pytest.raises(tj.IndexOutOfBoundsError, match="index 4 is out of bounds"):
        f(x, np.array([0, 4]))                          # the first call: compiled
    assert f.cache_info()["compiles"] + f.cache_info()["disk_loads"] == 1
    identical(f(x, np.array([3, -4]))[0], np.array([6.0, 0.0]))   # negative from the end
    for bad in ([-5, 0], [2**40, 1], [1, 4]):
        with pytest.raises(tj.IndexOutOfBoundsError):
            f(x, np.array(bad))
    check(gather, (x, np.array([1, -1])), (x, np.array([0, 3])))
    g = tj.grad(lambda x, i: np.sum(x[i] ** 2))
    with pytest.raises(tj.IndexOutOfBoundsError):
        g(x, np.array([5]))
    identical(g(x, np.array([1, 1])), np.array([0.0, 4.0, 0.0, 0.0]))
    assert runners(g)[0].codegen == "llvm"


# ---- control flow and the numba fallback -----------------------------------------------------
def loop(x):
    return tj.fori_loop(0, 3, lambda k, c: c * 0.5 + np.sin(c), x)


def test_control_flow_lowers():
    def cumulative(x):
        return tj.scan(lambda c, v: (c + v, c * v), 0.0, x)

    def branch(x):
        return tj.cond(np.sum(x) > 0, lambda x: x * 2.0, lambda x: -x, x)

    x = np.linspace(-1.0, 1.0, 5)
    check(loop, (x,), (x * 2,), exact=False)
    check(cumulative, (x,), (x[::-1].copy(),), exact=False)
    check(branch, (x + 1,), (x - 1,), exact=False)


CARRIES = textwrap.dedent("""
    import numpy as np, tapejit as tj
    x, y, z = np.linspace(-1, 1, 6), np.linspace(2, 3, 6), np.linspace(5, 6, 6)
    bodies = {
        "swap": lambda x, y: tj.fori_loop(0, 2, lambda k, c: (c[1], c[0] * 2), (x, y)),
        "copy": lambda x, y: tj.fori_loop(0, 3, lambda k, c: (c[0] + 1, c[0]), (x, y)),
        "rotate": lambda x, y: tj.fori_loop(0, 4, lambda k, c: (c[1], c[2], c[0] + 1),
                                            (x, y, z)),
        "scan": lambda x, y: tj.scan(lambda c, v: ((c[1], c[0] * v), v), (x, y), z)[0],
        "keep": lambda x, y: tj.fori_loop(0, 3, lambda k, c: (c[0], c[1] * 2), (x, y)),
    }
    for name, fn in bodies.items():
        f, want = tj.jit(fn), tj.jit(fn, backend="interpret")(x, y)
        try:
            for call in range(2):
                for got, w in zip(f(x, y), want):
                    np.testing.assert_allclose(got, w, rtol=1e-15)
            codegen = [s.run.codegen for s in f._cache.values()]
            print(name, "ok" if codegen == ["llvm"] else codegen)
        except Exception as err:
            print(name, type(err).__name__, " ".join(str(err).split("This is")[0].split()))
""")


@pytest.mark.parametrize("unrolled", [2000, 0])
def test_loop_carries_that_trade_buffers(unrolled, tmp_path):
    """A body that returns one carry's array as another's (swapped, copied, rotated) while
    making new ones: each buffer is freed only when no carry holds it. (In a new process: a
    buffer freed too early is read after it is freed.) With the hand-over checks written out,
    and as loops over tables (ownership.py's UNROLLED: 0 makes every function use them)."""
    setting = f"from tapejit.codegen.llvm import ownership; ownership.UNROLLED = {unrolled}\n"
    out = _child(setting + CARRIES, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [f"{name} ok" for name in
                                       ("swap", "copy", "rotate", "scan", "keep")], out.stdout


def test_a_large_program_compiles_in_parts(tmp_path):
    """Past lower.py's PART_LINES (here: 1 line) the functions the entry calls compile as
    modules of their own, exported and declared where called; every program still agrees
    with the interpreter, first call and later calls, in a new process."""
    setting = "from tapejit.codegen.llvm import lower; lower.PART_LINES = 1\n"
    check = textwrap.dedent("""
        print("parts", min(len(s.run.program.lowered.parts) for f in made
                           for s in f._cache.values()))
    """)
    made = "f, want = tj.jit(fn), tj.jit(fn, backend=\"interpret\")(x, y)\n"
    source = CARRIES.replace("for name, fn", "made = []\nfor name, fn", 1).replace(
        made, made + "    made.append(f)\n", 1)
    out = _child(setting + source + check, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:-1] == [f"{name} ok" for name in ("swap", "copy", "rotate", "scan", "keep")]
    assert lines[-1].startswith("parts ") and int(lines[-1].split()[1]) >= 2, lines


PARALLEL_IN_PARTS = textwrap.dedent("""
    from tapejit.codegen.llvm import lower; lower.PART_LINES = 1
    import numpy as np, tapejit as tj
    x = np.linspace(-1, 1, 300_000)          # the body's loop nest runs in parallel chunks
    fn = lambda x: tj.fori_loop(0, 3, lambda k, c: np.tanh(c) * 1.5 + np.sin(c), x)
    f, g = tj.jit(fn), tj.jit(tj.grad(lambda x: np.sum(fn(x))))
    for made, want in ((f, tj.jit(fn, backend="interpret")(x)),
                       (g, tj.grad(lambda x: np.sum(fn(x)), backend="interpret")(x))):
        for call in range(2):
            np.testing.assert_allclose(made(x), want, rtol=1e-12, atol=1e-13)
        run = next(iter(made._cache.values())).run
        print(run.codegen, len(run.program.lowered.parts) >= 3)
""")


def test_a_function_compiled_apart_hands_its_parallel_loops_to_the_runtime(tmp_path):
    """A function moved to a module of its own (PART_LINES) whose loop nest runs in parallel
    chunks declares the chunk function, defined in the chunk's own module."""
    out = _child(PARALLEL_IN_PARTS, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["llvm", "True", "llvm", "True"], out.stdout


def test_a_scan_over_rows_and_the_gradient_of_a_loop_lower():
    """The body reads `xs[k]`, a row of a 2-d array (the reverse scan of a loop's gradient
    too)."""
    x = np.linspace(-1.0, 1.0, 6)
    check(lambda x: np.sum(loop(x) ** 2), (x,), (x * 2,), exact=False, transform=tj.grad)
    check(lambda x: tj.scan(lambda c, v: (c + v, c * v), x[0], x), (x.reshape(2, 3),),
          exact=False)


def _resident_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_buffers_made_in_loops_are_freed():
    """Loop bodies allocate their results (malloc) and carries take them over: 100 calls of
    programs that would leak a 160 kB buffer per iteration leave memory where it was."""
    x = np.random.default_rng(7).standard_normal((4, 20000))
    programs = [
        tj.jit(lambda x: tj.fori_loop(0, 3, lambda k, c: tj.fori_loop(
            0, 2, lambda j, d: d * 0.5 + c, c), x)),
        tj.grad(lambda x: np.sum(tj.scan(lambda c, v: (c * 0.9 + np.sin(v), c * v), x[0],
                                         x)[1])),
        tj.jit(lambda x: tj.fori_loop(0, 4, lambda k, c: tj.cond(
            np.sum(c) > 0, lambda c: c - 1.0, lambda c: c + 2.0, c), x))]
    for f in programs:
        f(x)
        assert f.cache_info()["codegen"] == {"llvm": 1, "numba": 0}
    before = _resident_mb()
    for _ in range(100):
        for f in programs:
            f(x)
    assert _resident_mb() - before < 8      # a leak: >= 15 MB per program


def test_a_while_loop_with_an_array_in_its_carry_lowers():
    """Its test calls a function of the module (`while body0(c0, c1, S)[0]:`)."""
    x = np.linspace(-1.0, 1.0, 5)
    check(lambda v: tj.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.1),
                                  (0, v))[1], (x,), (x * 2,), exact=False)


def test_the_gradient_of_a_cumulative_sum_lowers():
    """Its backward pass loops backwards (`range(n - 1, -1, -1)`)."""
    x = np.linspace(-1.0, 1.0, 5)
    check(lambda x: np.sum(np.cumsum(x) ** 2), (x,), exact=False, transform=tj.grad)


@tj.njit_primitive(vjp=lambda ct, out, x: (ct * 2.0 * x,))
@numba.njit
def _square(x):         # a user's numba kernel: the lowering leaves its programs to numba
    out = np.empty_like(x)
    for i in range(x.size):
        out.flat[i] = x.flat[i] * x.flat[i]
    return out


def test_what_the_lowering_does_not_cover_runs_on_numba(monkeypatch):
    x = np.linspace(-1.0, 1.0, 5)
    check(lambda x: _square(x[::-1]) * 2.0 + x, (x,), (x * 3,), codegen="numba")
    check(lambda x: np.sum(_square(x) * x), (x,), codegen="numba", transform=tj.grad)

    def refuse(*args, **kwargs):
        raise NotCovered("anything (this test)")
    monkeypatch.setattr(compile_module, "lower", refuse)
    check(lambda x: np.exp(x) - x * 3.0, (x,), (x * 2,), codegen="numba", exact=False)


def test_codegen_numba_makes_every_program_numbas(settings):
    settings(CODEGEN="numba")
    x = np.linspace(-1.0, 1.0, 5)
    check(lambda x: np.exp(x) + x // 0.3, (x,), codegen="numba", exact=False)
