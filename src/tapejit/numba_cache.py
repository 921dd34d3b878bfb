"""Where numba keeps the machine code of tapejit's generated modules, and how it is checked.

Imported when the first program loads (it imports numba). cache.py registers each module's
file with `claim(file, folder)` before running it:

- `Locator`, first in numba's list of cache locators, claims only those files: their machine
  code goes to `folder` (`<cache_root>/__pycache__`) and nowhere else. Without it numba falls
  back to `~/.cache/numba` whenever that folder is not writable, which `tapejit cache clear`
  never clears.
- `attach(module)` gives each of the module's dispatchers a `CheckedCache`, whose index and
  object files each get a sidecar `<file>.sha256` written after the file; a file whose bytes
  do not match its sidecar (a flipped bit, a torn write, a file from before sidecars) is
  deleted and its function recompiled, never loaded: numba stores no checksums, and loading
  damaged machine code can crash the process. A module with no usable folder (`folder` None)
  gets a `NullCache`: its code is compiled in memory only.
- A failed write (a full disk) leaves the program in memory and calls the `on_save_error`
  that `install` was given (cache.py warns once).
- `install` starts numba's threading layer before any module loads. numba records that cached
  machine code needs it only for a function compiled with parallel=True itself, not for one
  that links one in (blas.blocks through blas.matmul) after loading it from the cache: such a
  program, loaded in a fresh process, called a null address (a segfault).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import numba
from numba.core.caching import (CacheImpl, FunctionCache, IndexDataCacheFile, NullCache,
                                _CacheLocator)
from numba.core.dispatcher import Dispatcher

_claimed: dict[str, Path | None] = {}   # module file -> its numba folder (None: memory only)
_on_save_error: Callable[[Path, OSError], None] = lambda folder, err: None   # (install)
SUFFIX = ".sha256"


def claim(file: str, folder: Path | None) -> None:
    """Keep the machine code of the module at `file` in `folder` (None: in memory only)."""
    _claimed[file] = folder


def usable(folder: Path) -> bool:
    """Whether numba can write to `folder`; a folder of ours with the wrong permissions (the
    user's, not writable) is made private and writable again first."""
    for attempt in range(2):
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
            return True
        except OSError:
            if attempt or not folder.is_dir():
                return False
            try:
                os.chmod(folder, 0o700)
            except OSError:
                return False
    return False


class Locator(_CacheLocator):
    """numba's cache locator for the files `claim` registered (see the module docstring)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._folder = _claimed[py_file]
        self._stamp = hashlib.sha256(Path(py_file).read_bytes()).digest() \
            if self._folder is not None else b""

    def ensure_cache_path(self) -> None:
        if self._folder is None:
            raise OSError("tapejit: this module's machine code is kept in memory only")
        super().ensure_cache_path()

    def get_cache_path(self) -> str:
        return str(self._folder) if self._folder is not None else ""

    def get_source_stamp(self) -> bytes:
        return self._stamp

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> "Locator | None":
        return cls(py_func, py_file) if py_file in _claimed else None


def _digest_path(path: str) -> str:
    return path + SUFFIX


def _sound(path: str) -> bool:
    """Whether the file at `path` matches its sidecar digest (a missing file is sound: numba
    treats it as a miss)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return True
    try:
        expected = Path(_digest_path(path)).read_text().strip()
    except (OSError, UnicodeDecodeError):
        expected = ""
    return hashlib.sha256(data).hexdigest() == expected


def _discard(path: str) -> None:
    for victim in (path, _digest_path(path)):
        with contextlib.suppress(OSError):
            os.unlink(victim)


class _Hashing:
    """A file being written, hashed as it is written."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.f.write(data)


class CheckedFile(IndexDataCacheFile):
    """numba's index and object files, each with a sha256 sidecar (module docstring)."""

    @contextlib.contextmanager
    def _open_for_write(self, filepath: str) -> Iterator[Any]:
        with super()._open_for_write(filepath) as f:
            hashing = _Hashing(f)
            yield hashing
        with super()._open_for_write(_digest_path(filepath)) as f:
            f.write(hashing.sha.hexdigest().encode())

    def _load_index(self) -> dict:
        if not _sound(self._index_path):
            _discard(self._index_path)
            return {}
        return super()._load_index()

    def _load_data(self, name: str) -> Any:
        path = self._data_path(name)
        if not _sound(path):
            _discard(path)
            raise OSError(f"tapejit: {path} does not match its checksum")  # load(): a miss
        return super()._load_data(name)

    def save(self, key: Any, data: Any) -> None:
        try:
            super().save(key, data)
        except OSError as err:              # e.g. a full disk: the code stays in memory
            _on_save_error(Path(self._cache_path), err)


class CheckedCache(FunctionCache):
    """numba's per-function disk cache, on `CheckedFile`s."""

    def __init__(self, py_func: Any) -> None:
        super().__init__(py_func)
        self._cache_file = CheckedFile(self._cache_path, self._impl.filename_base,
                                       self._impl.locator.get_source_stamp())


def attach(module: ModuleType, on_disk: bool) -> None:
    """Give the module's own CPU dispatchers (not the user kernels it calls, nor CUDA kernels,
    whose caches are of another kind) their caches."""
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and value.py_func.__globals__ is vars(module) \
                and type(value._cache) is FunctionCache:
            value._cache = CheckedCache(value.py_func) if on_disk else NullCache()


def install(on_save_error: Callable[[Path, OSError], None]) -> None:
    """Put `Locator` first in numba's list (once); `on_save_error(folder, err)` hears of
    machine code that could not be written."""
    global _on_save_error
    _on_save_error = on_save_error
    numba.get_num_threads()     # starts the threading layer (module docstring)
    if Locator not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, Locator)
