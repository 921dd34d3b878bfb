"""Other packages' compiled extension modules, loaded without running their packages.

tapejit needs a few C extensions of packages whose import is slow: scipy's BLAS
(`scipy.linalg.cython_blas`, for numba's products; scipy.linalg's package takes 28-80 ms) and
numba's C helpers (`numba._helperlib`, for kernels numba compiled that call `numba_gamma` and
the like) and its memory manager (`numba.core.runtime._nrt_python`, for the LAPACK and sorting
kernels' `NRT_*` calls); numba's package takes 0.15-0.3 s. `load_alone` loads such a module from its
package's folder and puts it in `sys.modules`, where the package's own import, later, finds
it: one module object either way.
"""
from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType


def load_alone(name: str) -> ModuleType:
    """The extension module `name` ("package.sub.module"): imported as usual where its package
    is imported (or being imported) already, else loaded from the package's folder alone."""
    package, _, stem = name.rpartition(".")
    top = package.partition(".")[0]
    if name in sys.modules or package in sys.modules or top in sys.modules:
        return importlib.import_module(name)
    found = importlib.util.find_spec(top)
    folder = None if found is None or found.origin is None else \
        os.path.join(os.path.dirname(found.origin), *package.split(".")[1:])
    paths = [] if folder is None else [
        os.path.join(folder, stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    path = next((p for p in paths if os.path.exists(p)), None)
    if path is None:
        return importlib.import_module(name)
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)   # type: ignore[arg-type]
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def numba_helper(symbol: str) -> int | None:
    """numba's C helper `symbol` (numba_gamma, ...), from its helper library loaded alone
    (`load_alone`: no numba import, 0.15-0.3 s), or its memory manager's `NRT_*` (array kernels
    call them), from its extension loaded alone and set to Python's allocator, as numba's
    import would (`_nrt_memory`)."""
    if symbol.startswith("NRT_"):
        return _nrt_memory().c_helpers.get(symbol[len("NRT_"):])
    if not symbol.startswith("numba_"):
        return None
    return load_alone("numba._helperlib").c_helpers.get(symbol[len("numba_"):])


@functools.cache
def _nrt_memory() -> ModuleType:
    nrt = load_alone("numba.core.runtime._nrt_python")
    if "numba.core.runtime.nrt" not in sys.modules:     # (it does this when numba imports it)
        nrt.memsys_use_cpython_allocator()
    return nrt
