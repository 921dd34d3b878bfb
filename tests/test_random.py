"""tj.random: the Threefry-2x32 block against its published test vectors, the stream against
jax.random's, the same numbers eagerly, on the interpreter and compiled (first and later calls,
a new key per call without recompiling), the distributions' statistics, gradients through the
reparameterisation trick, edge shapes and the errors. The CUDA backend's stream is checked on
the simulator by test_cuda.py (cuda_check.py random).
"""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ops import random as RB

from gradcheck import check_grads

BACKENDS = ("interpret", "numba")
N = 100_000


def _values(out):
    return [np.asarray(leaf) for leaf in tj.pytree.flatten(out)[0]]


def _same(got, want, float_rtol=0.0):
    """Equal bit for bit; floats made with log/cos to `float_rtol` (math libraries differ)."""
    for g, w in zip(_values(got), _values(want), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if float_rtol and w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=float_rtol, atol=float_rtol)
        else:
            np.testing.assert_array_equal(g, w)


# ---- the block function -----------------------------------------------------------------------
KAT = [  # Random123's kat_vectors for threefry2x32_20: (counter, key) -> words
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_threefry_block_matches_the_published_test_vectors(backend):
    counters, keys, words = (np.array(column, np.uint32).T for column in zip(*KAT))
    for (c0, c1), (k0, k1), (x0, x1) in KAT:
        assert tuple(int(w) for w in RB.block(k0, k1, c0, c1)) == (x0, x1)
    packed = (words[0].astype(np.uint64) << np.uint64(32)) | words[1].astype(np.uint64)
    block = tj.jit(lambda k0, k1, c0, c1: (RB.threefry2x32(k0, k1, c0, c1, bits=64),
                                           RB.threefry2x32(k0, k1, c0, c1, bits=32)),
                   backend=backend)
    for _ in range(2):                       # first and later calls
        got64, got32 = block(keys[0], keys[1], counters[0], counters[1])
        np.testing.assert_array_equal(got64, packed)
        np.testing.assert_array_equal(got32, words[0] ^ words[1])


# ---- JAX's stream -------------------------------------------------------------------------------
def test_keys_bits_and_uniforms_are_jaxs():
    jax = pytest.importorskip("jax")
    for seed in (0, 42, 2**32 - 1):
        key, jkey = tj.random.key(seed), jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(key, np.asarray(jkey))
        np.testing.assert_array_equal(tj.random.split(key, 5), jax.random.split(jkey, 5))
        np.testing.assert_array_equal(tj.random.fold_in(key, 1234),
                                      jax.random.fold_in(jkey, 1234))
        np.testing.assert_array_equal(tj.random.bits(key, (3, 4)), jax.random.bits(jkey, (3, 4)))
        np.testing.assert_array_equal(tj.random.uniform(key, (7, 5), np.float32),
                                      jax.random.uniform(jkey, (7, 5)))
        with jax.enable_x64(True):
            np.testing.assert_array_equal(tj.random.bits(key, (9,), np.uint64),
                                          jax.random.bits(jkey, (9,), "uint64"))
            np.testing.assert_array_equal(tj.random.uniform(key, (6,)),
                                          jax.random.uniform(jkey, (6,), "float64"))


# ---- the same numbers everywhere -------------------------------------------------------------
def draws(key, x):
    """One of each: keys, bits, every distribution, in float32 and float64."""
    keys = tj.random.split(key, 4)
    return {
        "split": keys, "fold_in": tj.random.fold_in(key, 3),
        "bits32": tj.random.bits(keys[0], (5,)),
        "bits64": tj.random.bits(keys[0], (2, 3), np.uint64),
        "uniform32": tj.random.uniform(keys[1], (4, 3), np.float32, -1.0, 2.0),
        "uniform64": tj.random.uniform(keys[1], x.shape) + x,
        "bernoulli": tj.random.bernoulli(keys[2], 0.3, (7,)),
        "randint": tj.random.randint(keys[3], (6,), -5, 17),
        "categorical": tj.random.categorical(key, np.log(np.array([0.1, 0.2, 0.7])), shape=(5,)),
        "normal32": tj.random.normal(tj.random.fold_in(key, 1), (3, 2), np.float32),
        "normal64": tj.random.normal(tj.random.fold_in(key, 2), x.shape) * 2.0 + x,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_stream_eagerly_interpreted_and_compiled(backend):
    x = np.linspace(0.0, 1.0, 6).reshape(2, 3)
    traced = tj.jit(draws, backend=backend)
    for seed in range(4):                     # a new key per call: the first and later calls
        key = tj.random.key(seed)
        _same(traced(key, x), draws(key, x), float_rtol=1e-6)
    info = traced.cache_info()
    assert info["traces"] == 1, info
    if backend == "numba":
        assert info["compiles"] + info["disk_loads"] == 1 and info["hits"] == 3, info


def test_keys_are_arguments_not_constants():
    step = tj.jit(lambda x, key: x * tj.random.bernoulli(key, 0.5, x.shape), backend="numba")
    x, key = np.ones(64), tj.random.key(0)
    masks = []
    for _ in range(5):
        key, sub = tj.random.split(key)
        masks.append(step(x, sub))
    assert len({m.tobytes() for m in masks}) == 5
    info = step.cache_info()
    assert info["traces"] == 1 and info["compiles"] + info["disk_loads"] == 1, info
    tape = tj.make_tape(lambda x, key: tj.random.normal(key, (1000, 1000)))(x, key)
    assert not tape.constvars        # the counters are an op, not a 4 MB constant


def test_traced_seed_and_fold_in_data():
    for seed in (0, 7, -1, 2**40 + 3):
        want = tj.random.key(seed)
        np.testing.assert_array_equal(tj.jit(tj.random.key)(np.int64(seed)), want)
    assert tuple(tj.random.key(-1)) == (0xFFFFFFFF, 0xFFFFFFFF)
    key = tj.random.key(5)
    folded = tj.jit(lambda key, i: tj.random.fold_in(key, i))
    for i in (0, 1, 99, -1):
        np.testing.assert_array_equal(folded(key, i), tj.random.fold_in(key, i))


# ---- statistics on 10^5 draws ------------------------------------------------------------------
def _chi2_ok(counts, probabilities):
    """A chi-square goodness of fit that a correct sampler fails once in 10^4 seeds."""
    from scipy import stats
    expected = probabilities * counts.sum()
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return stats.chi2.sf(statistic, len(counts) - 1) > 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_continuous_distributions(dtype):
    pytest.importorskip("scipy")
    from scipy import stats
    key = tj.random.key(2024)
    u = tj.random.uniform(key, (N,), dtype)
    assert u.dtype == dtype and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 5e-3 and abs(u.var() - 1 / 12) < 3e-3
    assert _chi2_ok(np.histogram(u, 20, (0, 1))[0], np.full(20, 0.05))
    w = tj.random.uniform(key, (N,), dtype, -3.0, 5.0)
    assert -3 <= w.min() and w.max() < 5 and abs(w.mean() - 1) < 0.04
    z = tj.random.normal(key, (N,), dtype)
    assert z.dtype == dtype and np.isfinite(z).all()
    assert abs(z.mean()) < 0.015 and abs(z.var() - 1) < 0.02
    assert abs(stats.skew(z)) < 0.03 and abs(stats.kurtosis(z)) < 0.06
    edges = stats.norm.ppf(np.linspace(0, 1, 21))
    assert _chi2_ok(np.histogram(z, edges)[0], np.full(20, 0.05))
    # streams of different keys, and of one key's two normal counters, are uncorrelated
    a, b = tj.random.split(key)
    assert abs(np.corrcoef(tj.random.uniform(a, (N,)), tj.random.uniform(b, (N,)))[0, 1]) < 0.015


def test_discrete_distributions():
    pytest.importorskip("scipy")
    key = tj.random.key(99)
    coins = tj.random.bernoulli(key, 0.3, (N,))
    assert coins.dtype == np.bool_ and abs(coins.mean() - 0.3) < 0.007
    ps = np.array([0.3, 0.7], np.float32)
    both = tj.random.bernoulli(key, ps, (N // 2, 2))          # p broadcast along the last axis
    np.testing.assert_allclose(both.mean(axis=0), ps, atol=0.01)
    ints = tj.random.randint(key, (N,), -3, 7)
    assert ints.dtype == np.int64 and ints.min() == -3 and ints.max() == 6
    assert _chi2_ok(np.bincount(ints + 3, minlength=10), np.full(10, 0.1))
    assert tj.random.randint(key, (3,), 0, 10, np.int32).dtype == np.int32
    probabilities = np.array([0.1, 0.2, 0.3, 0.4])
    picks = tj.random.categorical(key, np.log(probabilities), shape=(N,))
    assert _chi2_ok(np.bincount(picks, minlength=4), probabilities)
    rows = tj.random.categorical(key, np.log([[0.9, 0.1], [0.1, 0.9]]), axis=1, shape=(N // 2, 2))
    np.testing.assert_allclose(rows.mean(axis=0), [0.1, 0.9], atol=0.01)
    # every position of a permutation takes every value equally often
    firsts = [tj.random.permutation(k, 5)[0] for k in tj.random.split(key, 5000)]
    assert _chi2_ok(np.bincount(firsts, minlength=5), np.full(5, 0.2))


def test_split_and_fold_in_make_distinct_keys():
    key = tj.random.key(1)
    keys = np.concatenate([tj.random.split(key, 1000),
                           [tj.random.fold_in(key, 10**6 + i) for i in range(1000)], [key]])
    assert len({tuple(k) for k in keys}) == len(keys)
    # as in JAX: split's key i is fold_in's key for data i
    np.testing.assert_array_equal(tj.random.split(key, 3)[2], tj.random.fold_in(key, 2))


def test_permutation():
    key = tj.random.key(3)
    perm = tj.random.permutation(key, 10)
    assert perm.dtype == np.int64 and sorted(perm) == list(range(10))
    x = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(tj.random.permutation(key, x, axis=1),
                                  x[:, tj.random.permutation(key, 4)])
    independent = tj.random.permutation(key, x, axis=1, independent=True)
    np.testing.assert_array_equal(np.sort(independent, axis=1), x)
    # a concrete key under tracing: the order is a constant of the program, x is traced
    shuffle = tj.jit(lambda x: tj.random.permutation(key, x), backend="numba")
    np.testing.assert_array_equal(shuffle(x * 1.0), x[tj.random.permutation(key, 3)])
    # a traced key: the random bits and their argsort are traced, first and later calls
    def shuffles(key, x):
        return (tj.random.permutation(key, 5), tj.random.permutation(key, x, axis=1),
                tj.random.permutation(key, x, axis=1, independent=True))
    for backend in BACKENDS:
        traced = tj.jit(shuffles, backend=backend)
        for k in (key, tj.random.key(4), key):
            _same(traced(k, x * 1.0), shuffles(k, x * 1.0))


# ---- gradients ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_reparameterisation_gradient_matches_finite_differences(backend):
    def expected_loss(mu, log_sigma, key):
        z = mu + np.exp(log_sigma) * tj.random.normal(key, (256, 3))
        return np.mean(np.sin(z) * z)

    args = (np.array([0.3, -0.2, 1.0]), np.array([0.1, -0.5, 0.2]), tj.random.key(8))
    check_grads(expected_loss, args, argnums=(0, 1))
    grads = tj.grad(expected_loss, argnums=(0, 1), backend=backend)
    for seed in range(2):
        key = tj.random.key(seed)
        for g, w in zip(grads(*args[:2], key), tj.grad(expected_loss, argnums=(0, 1),
                                                       backend="interpret")(*args[:2], key)):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    with pytest.raises(tj.DtypeError, match="uint32"):
        tj.grad(expected_loss, argnums=2)(*args)


# ---- shapes, dtypes and errors ---------------------------------------------------------------
SHAPES = [(), (0,), (1,), (2, 0, 3), (1, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_empty_and_single_element_draws(shape):
    def all_of(key):
        return (tj.random.bits(key, shape), tj.random.uniform(key, shape, np.float32),
                tj.random.normal(key, shape), tj.random.bernoulli(key, 0.5, shape),
                tj.random.randint(key, shape, 0, 3), tj.random.split(key, shape))
    key = tj.random.key(4)
    eager = all_of(key)
    assert [a.shape for a in eager] == [shape] * 5 + [shape + (2,)]
    for backend in BACKENDS:
        _same(tj.jit(all_of, backend=backend)(key), eager, float_rtol=1e-12)


def test_errors_say_what_to_do():
    key = tj.random.key(0)
    with pytest.raises(tj.DtypeError, match=r"tj.random.uniform: a key is a uint32 array"):
        tj.random.uniform(np.zeros(2), (3,))
    with pytest.raises(tj.ShapeError, match=r"tj.random.key\(seed\)"):
        tj.random.normal(tj.random.split(key, 2), (3,))
    with pytest.raises(tj.DtypeError, match="float32 or float64"):
        tj.random.normal(key, (3,), np.int32)
    with pytest.raises(tj.DtypeError, match="integer"):
        tj.random.key(1.5)
    with pytest.raises(tj.ConcretizationError, match="static_argnums"):
        tj.jit(lambda key, n: tj.random.uniform(key, (n,)))(key, 3)


def test_numpy_random_where_it_is_not_recorded_points_to_tj_random():
    """Under vmap a draw would be one for the whole batch (draws.py records them under grad,
    value_and_grad and jit)."""
    with pytest.raises(tj.RandomnessError, match=r"tj.random.normal\(key, x.shape\)") as err:
        tj.vmap(lambda x: x + np.random.normal(size=x.shape))(np.ones(3))
    assert __file__ in str(err.value) and "tj.random.split" in str(err.value)


rs = np.random.RandomState(1)       # a module generator named as the closure's below


def _noisy_objective(scale):
    rs = np.random.RandomState(0)   # the closure's generator, drawn from while tracing
    return lambda w: np.sum((w + scale * rs.randn(3)) ** 2)


_mixture_noise = _noisy_objective(1.0)     # a module-level helper holding the generator


def _calls_a_module_helper(w):
    return _mixture_noise(w) * 2.0


@pytest.mark.parametrize("objective", [_noisy_objective(1.0), _calls_a_module_helper],
                         ids=["closure-shadowed-by-a-global", "through-a-module-helper"])
def test_numpy_random_reached_by_any_path_draws_afresh(objective):
    """A generator counts once whatever its names (a module `rs` beside a closure's `rs`), and
    the functions a traced function calls by global name are searched too (HIPS autograd's
    bayesian_neural_net and mixture_variational_inference draw noise so): each call draws new
    numbers (draws.py), where they were once silently frozen."""
    grad = tj.grad(objective)
    assert not np.array_equal(grad(np.zeros(3)), grad(np.zeros(3)))
    assert grad.cache_info()["traces"] == 1
