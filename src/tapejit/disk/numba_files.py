"""Where numba keeps the machine code of tapejit's generated modules, and how it is checked.

Imported when the first program loads (it imports numba). store.py registers each module's
file with `claim(file, Claim(folder, key, stamp))` before running it (None: memory only):

- `Locator`, first in numba's list of cache locators, claims only those files: their machine
  code goes to `folder` (`<cache_root>/__pycache__`, or `lib/<name>`, checked by trust.py)
  and nowhere else, and their source stamp is `stamp` (a hash of the source as tapejit runs
  it, never of the file on disk). Without it numba falls back to `~/.cache/numba` whenever
  that folder is not writable, which `tapejit cache clear` never clears.
- `attach(module)` gives each of the module's dispatchers (CPU functions and CUDA kernels) a
  new cache whose index and object files are `CheckedFile`s: each is written sealed with the
  user's key (trust.seal) and read once into memory, authenticated, and unpickled from
  those same bytes. numba's own files are pickles, so loading one runs code: a file that is
  not authentic (another user's, planted, a flipped bit, a torn write, a file from before
  seals) is deleted and its function recompiled, never unpickled. A module with no usable
  folder gets a `NullCache`: its code is compiled in memory only.
- A failed write (a full disk) leaves the program in memory and calls the `on_save_error`
  that `install` was given (store.py warns once).
- `install` starts numba's threading layer before any module loads. numba records that cached
  machine code needs it only for a function compiled with parallel=True itself, not for one
  that links one in (blas.blocks through blas.matmul) after loading it from the cache: such a
  program, loaded in a fresh process, called a null address (a segfault).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, NamedTuple

import numba
from numba.core.caching import Cache, CacheImpl, IndexDataCacheFile, NullCache, _CacheLocator
from numba.core.dispatcher import Dispatcher

from .trust import UntrustedCacheError, read_own_file, seal, unseal, write_atomic


class Claim(NamedTuple):
    folder: Path     # where numba keeps the module's machine code (checked by trust.py)
    key: bytes       # seals every file numba writes there
    stamp: bytes     # the module's source stamp: a hash of the source tapejit runs


_claimed: dict[str, Claim | None] = {}   # module file -> its claim (None: memory only)
_on_save_error: Callable[[Path, OSError], None] = lambda folder, err: None   # (install)


def claim(file: str, where: Claim | None) -> None:
    """Keep the machine code of the module at `file` as `where` says (None: in memory only)."""
    _claimed[file] = where


class Locator(_CacheLocator):
    """numba's cache locator for the files `claim` registered (see the module docstring)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._claim = _claimed[py_file]

    def ensure_cache_path(self) -> None:
        if self._claim is None:
            raise OSError("tapejit: this module's machine code is kept in memory only")
        super().ensure_cache_path()

    def get_cache_path(self) -> str:
        return str(self._claim.folder) if self._claim is not None else ""

    def get_source_stamp(self) -> bytes:
        return self._claim.stamp if self._claim is not None else b""

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> "Locator | None":
        return cls(py_func, py_file) if py_file in _claimed else None


def _discard(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class CheckedFile(IndexDataCacheFile):
    """numba's index and object files, sealed with the user's key (module docstring)."""

    def __init__(self, cache_path: str, filename_base: str, source_stamp: bytes,
                 key: bytes) -> None:
        super().__init__(cache_path, filename_base, source_stamp)
        self._key = key

    @contextlib.contextmanager
    def _open_for_write(self, filepath: str) -> Iterator[Any]:
        buffer = io.BytesIO()
        yield buffer
        write_atomic(filepath, seal(self._key, filepath, buffer.getvalue()))

    def _read(self, path: str) -> bytes | None:
        """The authentic payload of the file at `path`, read once; None when it is missing or
        not authentic (then it is deleted)."""
        try:
            data = read_own_file(path)
        except UntrustedCacheError:
            data = b""
        if data is None:
            return None
        payload = unseal(self._key, path, data)
        if payload is None:
            _discard(path)
        return payload

    def _load_index(self) -> dict:
        data = self._read(self._index_path)
        if data is None:
            return {}
        stream = io.BytesIO(data)
        if pickle.load(stream) != self._version:
            return {}
        stamp, overloads = pickle.loads(stream.read())
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, name: str) -> Any:
        path = self._data_path(name)
        data = self._read(path)
        if data is None:
            raise OSError(f"tapejit: {path} is missing or not authentic")   # load(): a miss
        return pickle.loads(data)

    def save(self, key: Any, data: Any) -> None:
        try:
            super().save(key, data)
        except OSError as err:              # e.g. a full disk: the code stays in memory
            _on_save_error(Path(self._cache_path), err)


def attach(module: ModuleType) -> None:
    """Give the module's own dispatchers (not the user kernels it calls) new caches: on
    `CheckedFile`s in the folder the module's claim names, or none (memory only)."""
    where = _claimed.get(str(module.__file__))
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and value.py_func.__globals__ is vars(module) \
                and isinstance(value._cache, Cache):
            if where is None:
                value._cache = NullCache()
                continue
            fresh = type(value._cache)(value.py_func)    # located by `Locator` now
            fresh._cache_file = CheckedFile(fresh._cache_path, fresh._impl.filename_base,
                                            where.stamp, where.key)
            value._cache = fresh


def install(on_save_error: Callable[[Path, OSError], None]) -> None:
    """Put `Locator` first in numba's list (once); `on_save_error(folder, err)` hears of
    machine code that could not be written."""
    global _on_save_error
    _on_save_error = on_save_error
    numba.get_num_threads()     # starts the threading layer (module docstring)
    if Locator not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, Locator)
