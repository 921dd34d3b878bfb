"""tapejit's matrix-product kernel (codegen/gemm.py) against numpy, and the kernel programs
call."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tapejit as tj
from tapejit import config

gemm = pytest.importorskip("tapejit.codegen.gemm")

# (m, n, k): whole tiles, ragged edges, several k blocks of uneven length and row blocks, less
# than one tile, an empty sum and empty results
SHAPES = [(24, 32, 16), (13, 37, 5), (400, 70, 600), (12, 16, 1), (3, 40, 8), (50, 5, 9),
          (30, 40, 0), (0, 20, 5), (20, 0, 5)]


@pytest.mark.parametrize("threads", [False, True], ids=["serial", "threads"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_matches_numpy_for_every_transpose_and_edge(dtype, threads):
    product = gemm.packed_threads if threads else gemm.packed
    rng = np.random.default_rng(0)
    for m, n, k in SHAPES:
        for ta in (False, True):
            for tb in (False, True):
                a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
                b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
                op_a, op_b = (a.T if ta else a).astype(np.float64), (b.T if tb else b)
                want = op_a @ op_b.astype(np.float64)
                out = np.full((m, n), np.nan, dtype)
                product(a, b, out, ta, tb)
                # rounding error of a k-term sum, relative to the sum of |terms|
                scale = np.abs(op_a) @ np.abs(op_b).astype(np.float64) + 1e-30
                bound = 4 * max(k, 1) * np.finfo(dtype).eps
                assert np.all(np.abs(out - want) <= bound * scale), (m, n, k, ta, tb)


def test_small_and_skinny_products_go_to_blas_and_large_ones_are_packed():
    rng = np.random.default_rng(2)
    for m, n, k in [(3, 40, 8), (50, 5, 9), (64, 64, 64), (128, 128, 128), (1100, 16, 60)]:
        a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n))
        uses_blas = m < gemm.ROWS or n < gemm.VECTORS * gemm.VECTOR_BYTES // 8 or \
            m * n * k < gemm.SMALL
        assert gemm._blas_wins(a, np.empty((m, n)), False) == uses_blas
        gemm.link("float64", False)
        gemm.link("float64", True)
        for product in (gemm.matmul, gemm.matmul_threads):
            out = np.empty((m, n))
            product(a, b, out, False, False)
            np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def _program(monkeypatch, tmp_path, matmul, min_size):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TAPEJIT_MATMUL", matmul)
    monkeypatch.setenv("TAPEJIT_PARALLEL_MIN_SIZE", str(min_size))
    config.reload()

    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(1)
    w, x = rng.normal(size=(64, 64)), rng.normal(size=(300, 64))   # packed: 1.2M mul-adds
    grad = tj.value_and_grad(loss, backend="numba")
    source = tj.explain(grad)(w, x).source
    got, want = grad(w, x), tj.value_and_grad(loss, backend="interpret")(w, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    return source


@pytest.mark.parametrize("matmul, min_size, call", [
    ("tapejit", 0, "tj_gemm.matmul("),
    ("tapejit", 1, "tj_gemm.matmul_threads("),      # from 32 x 1 multiply-adds on threads
    ("blas", 1, "tj_blas.matmul("),
])
def test_programs_call_the_chosen_product_kernel(monkeypatch, tmp_path, matmul, min_size, call):
    source = _program(monkeypatch, tmp_path, matmul, min_size)
    calls = [line for line in source.splitlines() if ".matmul" in line]
    assert calls and all(call in line for line in calls), calls
    # tapejit's kernel is linked by name when the module loads, not compiled into it
    threads = "matmul_threads" in call
    assert (f"tj_gemm.link('float64', {threads})" in source) == call.startswith("tj_gemm")
    monkeypatch.undo()
    config.reload()


FRESH_PROCESS = """
import numpy as np, tapejit as tj
w, x = np.random.default_rng(1).normal(size=(64, 64)), np.random.default_rng(2).normal(size=(300, 64))
g = tj.grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2))
got = g(w, x)
t = np.tanh(x @ w)
assert np.allclose(got, x.T @ (2 * t * (1 - t * t)), rtol=1e-12, atol=1e-12)
info = g.cache_info()
print(info["compiles"], info["disk_loads"])
"""


def test_a_fresh_process_links_the_kernel_before_loading_a_cached_program(tmp_path):
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path), TAPEJIT_MATMUL="tapejit",
               TAPEJIT_FIRST_CALL="compile", TAPEJIT_PARALLEL_MIN_SIZE="0",
               TAPEJIT_BACKEND="numba")
    runs = [subprocess.run([sys.executable, "-c", FRESH_PROCESS], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    assert [r.stdout.split() for r in runs] == [["1", "0"], ["0", "1"]]


@pytest.mark.parametrize("w_shape, x_shape", [
    ((64, 3), (300, 64)),       # 3 outputs: a fixed size, narrower than any tile
    ((64, 64), (20, 64)),       # 82k multiply-adds at the traced sizes: under gemm.SMALL
])
def test_products_the_kernel_cannot_win_go_to_blas(monkeypatch, w_shape, x_shape):
    monkeypatch.setenv("TAPEJIT_MATMUL", "tapejit")
    config.reload()

    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(2)
    source = tj.explain(loss)(rng.normal(size=w_shape), rng.normal(size=x_shape)).source
    calls = [line for line in source.splitlines() if ".matmul" in line]
    assert len(calls) == 2 and all("tj_blas.matmul(" in line for line in calls), calls
    assert "tj_gemm" not in source.split("import numpy as np")[1]     # nothing linked
    monkeypatch.undo()
    config.reload()


def test_auto_takes_tapejits_kernel_exactly_where_numba_targets_avx512(monkeypatch):
    from tapejit.codegen.calls import own_matmul
    monkeypatch.delenv("TAPEJIT_MATMUL", raising=False)
    config.reload()
    assert own_matmul(np.dtype(np.float64)) == own_matmul(np.dtype(np.float32)) == gemm.AVX512
    assert not own_matmul(np.dtype(np.complex128))
    monkeypatch.setenv("TAPEJIT_MATMUL", "fastest")
    with pytest.raises(ValueError, match="TAPEJIT_MATMUL='fastest'.*auto, tapejit, blas"):
        config.reload()
    monkeypatch.undo()
    config.reload()
