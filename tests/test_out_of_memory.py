"""Programs that run out of memory raise tj.OutOfMemoryError, never crash: tests/memory_limit.py
runs each in a process whose address space is limited, on the compiled path (an array made
in a loop's step, an output the caller allocates, a row each chunk of a parallel loop
allocates, an array whose size in bytes overflows 64 bits), compiled by tapejit's LLVM
lowering and by numba, and on the interpreter, on a first and a later call, and checks the
program computes right afterwards. Without the checks of codegen/llvm/failures.py the first
of them crashed the process (a segmentation fault); numba's code raised a SystemError (the
parallel rows, a later call) and a ValueError (the overflow), and named no array."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

import tapejit as tj
from hang import HANG_S


@pytest.mark.parametrize("codegen", ["llvm", "numba"])
def test_programs_out_of_memory_raise_and_recover(tmp_path, codegen):
    driver = os.path.join(os.path.dirname(__file__), "memory_limit.py")
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "c"), TAPEJIT_FIRST_CALL="compile",
               TAPEJIT_CODEGEN=codegen, MALLOC_ARENA_MAX="1", MALLOC_MMAP_THRESHOLD_="131072")
    proc = subprocess.run([sys.executable, driver], env=env, capture_output=True, text=True,
                          timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "memory driver: 7 cases raised, 0 did not" in proc.stdout, proc.stdout
    lines = proc.stdout.splitlines()
    assert any("ok too_large (compiled)" in line and "8 EiB or more" in line for line in lines)
    assert any("ok loop_body (compiled)" in line and "memory_limit.py:" in line
               for line in lines)
    if codegen == "numba":      # its allocator gives no size: the program's largest arrays
        assert any("ok output (compiled)" in line and "its largest arrays: mul at" in line
                   for line in lines)


def test_the_error_is_a_memory_error_and_pickles():
    err = tj.OutOfMemoryError(3 << 40, (("mul", ("model.py", 7), "a float64 array of shape "
                                         "(1048576, 393216)"),))
    assert isinstance(err, MemoryError) and isinstance(err, tj.TapejitError)
    assert "3 TiB" in str(err) and "mul at model.py:7" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is tj.OutOfMemoryError and str(again) == str(err)
