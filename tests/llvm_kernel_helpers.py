"""A function for tests/test_llvm_library_calls.py to build an array kernel of: it raises an
exception whose arguments numba knows only at run time (a "dynamic" exception)."""
import numba


@numba.njit
def fail(x, k):
    if k >= x.shape[0]:
        raise ValueError("no row", k, x.shape[0])
    x[k] = 1.0
