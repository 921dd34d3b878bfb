"""The CUDA backend, tested without a GPU: the zoo and the op table on numba's CUDA simulator
against the interpreter, every generated kernel of the zoo compiled to PTX for compute
capability 9.0 (where the CUDA toolkit's NVVM is installed), and the zoo on a real GPU only
where `numba.cuda.is_available()`. Each runs tests/cuda_check.py in a child process: the
simulator replaces numba.cuda process-wide.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit import cuda_support
from hang import HANG_S

CHECK = Path(__file__).with_name("cuda_check.py")


def _check(mode: str, tmp_path: Path, simulate: bool) -> str:
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulate:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    args = [sys.executable, str(CHECK), mode] + (["--zoo"] if mode == "ptx" else [])
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=HANG_S)
    output = proc.stdout + proc.stderr
    if proc.stdout.startswith("skip:"):
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0 and "FAIL" not in output, output[-6000:]
    return output


def test_simulator_runs_zoo_and_op_table_like_the_interpreter(tmp_path):
    out = _check("sim", tmp_path, simulate=True)
    assert "ok mlp_softmax_xent" in out and out.count("ok ops ") >= 3


def test_generated_kernels_compile_to_ptx_for_sm90(tmp_path):
    out = _check("ptx", tmp_path, simulate=False)
    assert "kernels compiled to PTX" in out


def test_random_stream_on_the_simulator_equals_the_cpus(tmp_path):
    out = _check("random", tmp_path, simulate=True)
    assert "ok random stream" in out and "ok random\n" in out


def test_random_kernels_compile_to_ptx_for_sm90(tmp_path):
    out = _check("random", tmp_path, simulate=False)
    assert "kernels compiled to PTX" in out or "ok random\n" in out    # (on a GPU: values)


def test_products_through_cublas_on_the_simulator(tmp_path):
    """Every product form cuBLAS takes, its calls run through cuda_support's model of cuBLAS
    (column-major, transposes as flags, strided batches): values and gradients as the
    interpreter's, and each program's products counted as cuBLAS calls."""
    out = _check("products", tmp_path, simulate=True)
    assert out.count("\nok ") + out.startswith("ok ") == 8 and "ok two-layer MLP" in out, out


@pytest.mark.parametrize("batch", [None, 2, 0])
@pytest.mark.parametrize("m, k, n", [(3, 4, 5), (4, 4, 4), (1, 3, 1), (0, 3, 2), (3, 0, 2)])
def test_gemm_arguments_compute_the_row_major_product(m, k, n, batch):
    """cuda_support.gemm's arguments, run through the model of what cuBLAS does with them
    (column-major buffers), give op(a) @ op(b) of the row-major arrays, for each transpose."""
    rng = np.random.default_rng(0)
    lead = () if batch is None else (batch,)
    for ta in (False, True):
        for tb in (False, True):
            a = rng.normal(size=lead + ((k, m) if ta else (m, k)))
            b = rng.normal(size=lead + ((n, k) if tb else (k, n)))
            want = np.matmul(np.swapaxes(a, -1, -2) if ta else a,
                             np.swapaxes(b, -1, -2) if tb else b)
            got = np.full(lead + (m, n), np.nan)
            args = cuda_support.gemm_args(a.shape, b.shape, ta, tb)
            cuda_support.column_major_gemm(args, b.ravel(), a.ravel(), got.reshape(-1))
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                                       err_msg=f"ta={ta} tb={tb}")


def test_products_setting(monkeypatch):
    """TAPEJIT_CUDA_PRODUCTS: auto takes cuBLAS only on a GPU with nvmath-python; asking for
    cuBLAS without it says what to install."""
    import importlib.util
    monkeypatch.setattr(cuda_support, "_simulated", lambda: False)
    for installed in (True, False):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, _i=installed: object() if _i else None)
        monkeypatch.setenv("TAPEJIT_CUDA_PRODUCTS", "auto")
        tj.config.reload()
        assert cuda_support.products() == ("cublas" if installed else "kernel")
    monkeypatch.setenv("TAPEJIT_CUDA_PRODUCTS", "cublas")
    tj.config.reload()
    with pytest.raises(cuda_support.CudaUnavailableError, match="nvmath-python"):
        cuda_support.products()
    monkeypatch.setattr(cuda_support, "_simulated", lambda: True)
    assert cuda_support.products() == "cublas"      # the model of cuBLAS
    monkeypatch.setenv("TAPEJIT_CUDA_PRODUCTS", "auto")
    tj.config.reload()
    assert cuda_support.products() == "kernel"
    monkeypatch.delenv("TAPEJIT_CUDA_PRODUCTS")
    tj.config.reload()


def test_zoo_on_a_real_gpu(tmp_path):
    if cuda_support.problem() is not None:
        pytest.skip(f"no CUDA backend here: {cuda_support.problem()}")
    _check("device", tmp_path, simulate=False)


def test_unavailable_backend_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    reason = cuda_support.problem()
    if reason is None:
        pytest.skip("the CUDA backend is available here")
    assert "numba-cuda" in reason and ("pip install" in reason or "GPU" in reason)
    with pytest.raises(cuda_support.CudaUnavailableError, match="numba-cuda"):
        tj.grad(lambda x: x.sum(), backend="cuda")
    assert cuda_support.cuda_status().startswith("unavailable: ")


def test_simulator_counts_as_available(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert cuda_support.problem() is None
    assert "simulator" in cuda_support.cuda_status()


# ---- cheap checks without the simulator: the mapping in the generated source, the numpy shim

def _kernels(fn, *args):
    """The generated CUDA module of `fn`'s forward program, split into kernels by name."""
    from tapejit.codegen.cuda import generate
    source = generate(tj.explain(fn, backend="cuda", grad=False)(*args).tape)[0]
    parts = source.split("@cuda.jit(cache=True)\ndef ")[1:]
    return source, {part.split("(")[0]: part for part in parts}


def test_every_product_of_an_mlp_gradient_is_one_cublas_call():
    """Forward products, weight gradients (contracting the batch: the first operand passed
    transposed) and input gradients (the weights transposed): each a cuBLAS call on the
    arrays as they are, none left to a kernel."""
    from cuda_check import product_programs
    from tapejit.codegen.cuda import generate
    (_, fn, args), = [case for case in product_programs() if case[0] == "two-layer MLP"]
    tape = tj.explain(fn, argnums=(0, 1), backend="cuda")(*args).tape
    source = generate(tape, cublas=True)[0]
    calls = re.findall(r"tjrt\.gemm\((\w+), (\w+), \w+, (True|False), (True|False)\)", source)
    assert len(calls) == 6 and "TILE, TILE" not in source, source
    assert ("x", "p_w1", "False", "False") in calls        # x @ w1
    assert any(a == "x" and ta == "True" for a, _, ta, _ in calls)      # x.T @ g: dw1
    assert sum(tb == "True" for *_, tb in calls) == 2      # g @ w.T: dh and dx
    assert "tjrt.gemm" not in generate(tape)[0]          # kernels unless asked


def test_pair_nest_runs_one_thread_per_i_with_a_loop_over_j():
    from cuda_check import pair_forces
    for n in (7, 3):         # n == 3: the pair axes as long as the coordinates
        source, kernels = _kernels(pair_forces, np.ones((n, 3)))
        (name, kernel), = kernels.items()
        assert "thread form: one thread per element of axes [0]" in kernel, kernel
        assert "syncthreads" not in kernel and "shared" not in kernel, kernel
        assert f"{name}[tjrt.blocks(S[0]), TPB]" in source     # threads over i, not i * j
        assert "for t_i1 in range(S[0]):" in kernel             # the loop over j
    # more than 32 atoms: j in chunks, a thread per (chunk, i), the sums over j in rows
    source, kernels = _kernels(pair_forces, np.ones((33, 3)))
    name, kernel = next(iter(kernels.items()))
    assert f"{name}[tjrt.blocks(S[0] * t_nc), TPB]" in source and "t_nc = tjrt.chunks(" in source
    assert "t_e = t_e if t_e < S[0] else S[0]" in kernel
    assert "for t_i1 in range(t_c * t_cs, t_e):" in kernel
    assert f"{name}_v10" in kernels      # the kernel adding the chunks' rows


def test_pair_energy_gradient_runs_one_thread_per_i_then_one_per_j():
    from tapejit.codegen.cuda import generate
    from cuda_check import pair_energy
    for n in (6, 40):
        tape = tj.explain(pair_energy, backend="cuda")(np.ones((n, 3))).tape
        source = generate(tape)[0]
        kernels = {part.split("(")[0]: part for part in source.split("def ")[1:]}
        (a,) = [kernels[k] for k in kernels if re.fullmatch(r"t_k\d+a", k)]
        (b,) = [kernels[k] for k in kernels if re.fullmatch(r"t_k\d+b", k)]
        span = "t_c * t_cs, t_e" if n > 32 else "S[0]"   # chunks
        assert "one thread per element of axes [0]" in a and f"for t_i1 in range({span}):" in a
        assert "one thread per element of axes [1]" in b and f"for t_i0 in range({span}):" in b
        assert "syncthreads" not in b      # (a ends in a block tree: the energy)


def test_short_rows_run_in_one_thread_and_long_rows_on_a_block():
    from cuda_check import long_rows, short_rows
    for rows in (5, 32):     # 32: as many rows as the longest short row
        _, kernels = _kernels(short_rows, np.ones((rows, 5)))
        first = next(iter(kernels.values()))
        assert "thread form" in first and "for t_f0 in range(5):" in first, first
        assert "acc_sh_" in first       # the sum over the rows: a block tree of partial sums
    for cols in (33, 40):
        _, kernels = _kernels(long_rows, np.ones((3, cols)))
        first = next(iter(kernels.values()))
        assert "thread form" not in first and "cuda.syncthreads()" in first, first


def test_parallel_axes_of_a_nest():
    from tapejit.codegen.plan import SHORT, parallel_axes, serial_dims, short
    from tapejit.codegen.schedule import Loop
    from tapejit.dims import Dim
    i, j, k = Dim(0, 7), Dim(1, 7), Dim(2, 3)
    pairs = Loop((i, j), stages=[(i, j, k), (i, j)], stage_of={"r2": 0, "f": 0, "e": 1},
                 reductions={"r2": (2,), "f": (1,), "e": (0, 1)})
    assert parallel_axes(pairs) == [0]      # f reduces j; the energy reduces everything
    assert serial_dims(pairs, [0]) == [(j, k), (j,)]
    pairs.reductions["g"], pairs.stage_of["g"] = (0,), 0     # and a sum over i: none left
    assert parallel_axes(pairs) == []
    assert short((Dim(3, SHORT),)) and not short((Dim(3, SHORT), k)) and short(())


def test_numpy_shim_restores_row_stack_only_where_numba_cuda_needs_it():
    import types
    fake = types.SimpleNamespace(__version__="2.5.2", vstack=np.vstack)
    note = cuda_support.numpy_shim(fake, numba_cuda_version="0.30.4")
    assert fake.row_stack is np.vstack
    assert "numpy 2.5.2" in note and "numba-cuda 0.30.4" in note and "numpy<2.5" in note
    assert cuda_support.numpy_shim(fake, numba_cuda_version="0.30.4") is None   # done once
    old = types.SimpleNamespace(__version__="2.4.0", vstack=np.vstack, row_stack=np.vstack)
    assert cuda_support.numpy_shim(old, numba_cuda_version="0.30.4") is None
    bare = types.SimpleNamespace(__version__="2.5.2", vstack=np.vstack)
    if importlib.util.find_spec("numba_cuda") is None:      # numba's own numba.cuda: no shim
        assert cuda_support.numpy_shim(bare) is None and not hasattr(bare, "row_stack")


# ---- bench/cuda.py --peers and bench/cuda_device_check.sh, without a GPU

BENCH = Path(__file__).parent.parent / "bench"


def _bench():
    spec = importlib.util.spec_from_file_location("tj_bench_cuda", BENCH / "cuda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_peers_arguments_and_table():
    bench = _bench()
    args = bench.parse(["--peers"])
    assert (args.repeats, args.n, args.batch, args.side) == (7, 10**8, 65536, 13)
    assert bench.parse([]).repeats == 9
    quick = bench.parse(["--peers", "--quick"])
    assert (quick.n, quick.batch, quick.side) == (10**6, 1024, 6)
    for bad in (["--repeats", "0"], ["--peers", "--child", "lj-f64", "jax"]):
        with pytest.raises(SystemExit):
            bench.parse(bad)
    labels = {name: label for name, (label, _, _) in bench.workloads(args).items()}
    assert list(labels) == ["elementwise-f32", "elementwise-f64", "mlp-f32", "mlp-f64", "lj-f64"]
    assert labels["lj-f64"] == "Lennard-Jones N=2,197, float64"
    rows = [{"workload": "mlp-f64", "peer": "tapejit", "first_s": 4.5, "median_s": 0.0242},
            {"workload": "mlp-f64", "peer": "tapejit warm", "first_s": 0.31, "median_s": 0.024},
            {"workload": "mlp-f64", "peer": "jax", "first_s": 2.0, "median_s": 0.0202},
            {"workload": "mlp-f64", "peer": "torch", "skip": "not installed (torch)"},
            {"workload": "lj-f64", "peer": "tapejit", "failed": "over 90 s"}]
    lines = bench.table(rows, labels)
    assert "| MLP 64-256-256-10, batch 65,536, float64 | 24.20 ms | 20.20 ms | " \
           "not installed (torch) | – |" in lines
    assert "| Lennard-Jones N=2,197, float64 | failed | – | – | – |" in lines
    assert any(line.startswith("| MLP") and "| 4.50 s | 0.31 s | 2.00 s |" in line
               for line in lines)
    assert any("tapejit / JAX = 1.20x (<= 1.2x): met" in line for line in lines)
    assert any("first call, warm cache = 0.31 s (<= 0.5 s): met" in line for line in lines)
    assert lines[-1] == "failed lj-f64 tapejit: over 90 s"


def test_bench_peers_child_checks_its_gradient_on_the_simulator(tmp_path):
    bench = _bench()
    args = bench.parse(["--child", "elementwise-f64", "tapejit", "--n", "16"])
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    want = bench.reference("elementwise-f64", args)[0]
    np.savez(good, g0=want)
    np.savez(bad, g0=want + 1e-6)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", TAPEJIT_CACHE_DIR=str(tmp_path / "c"))
    results = []
    for ref in (good, bad):
        proc = subprocess.run([sys.executable, str(BENCH / "cuda.py"), "--child",
                               "elementwise-f64", "tapejit", "--ref", str(ref), "--n", "16",
                               "--repeats", "2"], env=env, capture_output=True, text=True,
                              timeout=HANG_S)
        line = next(x for x in proc.stdout.splitlines() if x.startswith(bench.MARK))
        results.append(json.loads(line[len(bench.MARK):]))
    assert results[0]["error"] < 1e-14 and results[0]["median_s"] > 0, results
    assert "gradient off by" in results[1]["failed"], results


def test_device_check_script_parses_and_runs_every_part():
    script = BENCH / "cuda_device_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "bench/cuda.py --peers" in text and "tests/cuda_check.py device" in text
    assert "tests/cuda_check.py products" in text
    budget = sum(int(n) for n in re.findall(r"^timeout (\d+) ", text, re.M))
    assert 0 < budget < 8 * 60, budget
