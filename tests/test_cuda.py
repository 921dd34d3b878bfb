"""The CUDA backend, tested without a GPU: the zoo and the op table on numba's CUDA simulator
against the interpreter, every generated kernel of the zoo compiled to PTX for compute
capability 9.0 (where the CUDA toolkit's NVVM is installed), and the zoo on a real GPU only
where `numba.cuda.is_available()`. Each runs tests/cuda_check.py in a child process: the
simulator replaces numba.cuda process-wide.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tapejit as tj
from tapejit import cuda_support

CHECK = Path(__file__).with_name("cuda_check.py")


def _check(mode: str, tmp_path: Path, simulate: bool, timeout: int) -> str:
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulate:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    args = [sys.executable, str(CHECK), mode] + (["--zoo"] if mode == "ptx" else [])
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    if proc.stdout.startswith("skip:"):
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0 and "FAIL" not in output, output[-6000:]
    return output


def test_simulator_runs_zoo_and_op_table_like_the_interpreter(tmp_path):
    out = _check("sim", tmp_path, simulate=True, timeout=300)
    assert "ok mlp_softmax_xent" in out and out.count("ok ops ") >= 3


def test_generated_kernels_compile_to_ptx_for_sm90(tmp_path):
    out = _check("ptx", tmp_path, simulate=False, timeout=600)
    assert "kernels compiled to PTX" in out


def test_random_stream_on_the_simulator_equals_the_cpus(tmp_path):
    out = _check("random", tmp_path, simulate=True, timeout=300)
    assert "ok random stream" in out and "ok random\n" in out


def test_random_kernels_compile_to_ptx_for_sm90(tmp_path):
    out = _check("random", tmp_path, simulate=False, timeout=300)
    assert "kernels compiled to PTX" in out or "ok random\n" in out    # (on a GPU: values)


def test_zoo_on_a_real_gpu(tmp_path):
    if cuda_support.problem() is not None:
        pytest.skip(f"no CUDA backend here: {cuda_support.problem()}")
    _check("device", tmp_path, simulate=False, timeout=600)


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
