"""On-disk, content-addressed cache of generated numba modules.

    prog = load_module(source, "entry", key=None)   # -> CachedModule
    out = prog(*args)          # numba compiles, or loads machine code from its disk cache
    prog.compiles, prog.disk_loads, prog.recoveries   # counts in this process
    prog.fn                    # the numba dispatcher (calling it directly skips recovery)
    cache_root() -> Path       # <TAPEJIT_CACHE_DIR>/<versions>/, private (0o700), checked
    sealed_dir("llvm", "obj") -> Root   # a directory under it, checked, and the key to seal with
    cache_entries() -> list[CacheEntry]; clear_cache() -> int

Every directory from `/` to the one used is checked, and every file loaded is authenticated
with the user's key, before anything in it is unpickled or run (trust.py; the threat
model is docs/sharp-bits.md's "What the disk cache trusts").

Each program is published once, atomically, as `<cache_root>/tj_<hash>.py` (hash of source
and key; a header line holds the body's sha256, for `cache_entries`) and never rewritten while
it holds the program: a file that differs is replaced. The file is for people and tracebacks:
the module runs from the source in memory, never from the file, and numba's source stamp is a
hash of that source. Modules enter `sys.modules` before they run, so numba can unpickle them
in later processes, and their text enters `linecache`, so tracebacks show generated lines
wherever the file goes. numba keeps their machine code in `<cache_root>/__pycache__` and
nowhere else, each file sealed with the key: a file that is not authentic (planted, another
user's, a flipped bit in machine code, which would still unpickle and could crash the
process) is deleted and its function recompiled (numba_files.py). An exception raised inside
`numba.core.caching` during a call purges the module's numba files, re-imports it and calls
again; if that fails too, the program compiles in memory only.

A cache directory that cannot hold programs (read-only, not a directory, one another user
could write, a full disk) is no error: programs compile in memory only, with one
`TapejitWarning` naming the directory and why (`warn_memory_only`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import linecache
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ..config import config
from ..errors import warn_at_user
from .trust import (Root, UntrustedCacheError, checked_dir, open_root, read_own_file,
                    unseal)

if TYPE_CHECKING:
    from .numba_files import Claim

_FORMAT = 3  # bump when the file layout below changes (2: checksum sidecars; 3: sealed files)
_HEADER = "# tapejit generated program, body sha256="
_load_lock = threading.RLock()
_modules: dict[tuple[Path, str], "CachedModule"] = {}
_warned: set[Path] = set()   # directories `warn_memory_only` warned about
# names every generated module can read besides math/numba/np (user kernels, from custom.py)
GLOBALS: dict[str, Any] = {}
# ... and modules it reads by a name (tj_vmath, tj_blas): imported when the first program loads,
# so that `import tapejit` does not import numba
MODULES: dict[str, str] = {}


OBJECTS = Path("llvm", "obj")    # the llvm generator's programs (codegen/llvm/jit.py)


class CacheEntry(NamedTuple):
    hash: str
    path: Path
    size: int  # bytes: the .py file plus numba's index and object files
    mtime: float  # most recent write among those files
    valid: bool  # the header's hash matches the body


@functools.cache
def _tag() -> str:
    """The versions in the directory name: an upgrade never reads stale code."""
    from .. import __version__
    parts = [f"v{_FORMAT}", f"{sys.implementation.cache_tag}", "tapejit" + __version__,
             "numba" + _version("numba"), "llvmlite" + _version("llvmlite")]
    # numba's cache does not see changes to the numba functions generated code calls (and
    # inlines): vmath's kernels, blas, lapack, sorting, special... A program whose machine code
    # was cached against an older one could crash. Every codegen module with numba functions
    # is hashed (one hash: the directory name stays short)
    helpers = hashlib.sha256()
    for source in sorted(Path(__file__).parent.with_name("codegen").glob("*.py")):
        text = source.read_bytes()
        if b"njit" in text:
            helpers.update(source.name.encode() + text)
    parts.append("codegen" + helpers.hexdigest()[:10])
    return "-".join(parts)


def _version(dist: str) -> str:
    """The installed version of `dist` (a package of the same name): from the name of the
    `.dist-info` directory beside the package (0.2 ms), else importlib.metadata's (about 2 ms
    in a new process: it reads every entry of sys.path); "0" where it is not installed."""
    spec = importlib.util.find_spec(dist)
    if spec is not None and spec.origin:
        found = list(Path(spec.origin).parent.parent.glob(f"{dist}-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len(dist) + 1:-len(".dist-info")]
    from importlib import metadata          # (10-40 ms: not at `import tapejit`)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0"


def cache_root() -> Path:
    """The versioned cache directory, created private to the user; raises
    `UntrustedCacheError` (a PermissionError) for one another user could write."""
    return _open_root().path


def _open_root() -> Root:
    return open_root(config().cache_dir, _tag())


def _checked(*inner: str) -> Path:
    """A directory under the versioned one, created private and checked like it."""
    return checked_dir(config().cache_dir, _tag(), *inner)


def sealed_dir(*inner: str) -> Root:
    """A directory under the versioned one, created private and checked like it, with the
    user's key to seal the files kept there (the llvm generator's kernels and object code);
    raises OSError (UntrustedCacheError) where it cannot be used."""
    return Root(_checked(*inner), _open_root().key)


def library_dir(*inner: str) -> Root:
    """`sealed_dir` for library code compiled once per machine (the llvm generator's kernels
    and runtime): under TAPEJIT_LIBRARY_DIR where it is set, else the cache's."""
    base = config().library_dir or config().cache_dir
    return Root(checked_dir(base, _tag(), *inner), open_root(base, _tag()).key)


def _writable(folder: Path) -> bool:
    import tempfile                 # (with shutil: 3 ms of `import tapejit` otherwise)
    try:
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def warn_memory_only(where: Path, err: BaseException) -> None:
    """Warn, once per directory, that programs compile in memory only because `where` cannot
    hold them."""
    if where in _warned:
        return
    _warned.add(where)
    warn_at_user(
        f"tapejit cannot keep compiled programs in {where} ({type(err).__name__}: {err}); they "
        f"are compiled in memory only, so every new process compiles them again. Set "
        f"TAPEJIT_CACHE_DIR to a writable directory of your own, or fix this one (or free "
        f"disk space).")


def adopt(module: ModuleType) -> None:
    """Keep the machine code of one of tapejit's own numba modules (codegen/vmath.py and
    blas.py call this at their end) under the cache root too, in `lib/<name>`, checked like
    a generated module's; in memory only where that cannot be written. Every artifact tapejit
    makes lies under TAPEJIT_CACHE_DIR."""
    from . import numba_files
    numba_files.install(warn_memory_only)
    stamp = hashlib.sha256(Path(str(module.__file__)).read_bytes()).digest()
    where, folder = None, config().cache_dir
    try:
        key = _open_root().key
        folder = _checked("lib", module.__name__.rsplit(".", 1)[-1])
        if not _writable(folder):
            raise PermissionError("not a writable directory")
        where = numba_files.Claim(folder, key, stamp)
    except OSError as err:
        warn_memory_only(folder, err)
    numba_files.claim(str(module.__file__), where)
    numba_files.attach(module)


def _usable_root() -> Path | None:
    """`cache_root()`, or None (with a warning) when the directory cannot be used."""
    try:
        return cache_root()
    except OSError as err:
        warn_memory_only(config().cache_dir, err)
        return None


def _file_bytes(source: str) -> bytes:
    body = source.encode("utf-8")
    return f"{_HEADER}{hashlib.sha256(body).hexdigest()}\n".encode() + body


def _header_ok(data: bytes) -> bool:
    head, _, body = data.partition(b"\n")
    return head == f"{_HEADER}{hashlib.sha256(body).hexdigest()}".encode()


def _purge(path: Path, fn: Any = None) -> None:
    """Delete numba's cache files for the module at `path` (whose dispatcher is `fn`)."""
    cache_dir = getattr(getattr(fn, "_cache", None), "cache_path", None)
    folder = Path(cache_dir) if cache_dir else path.parent / "__pycache__"
    for f in folder.glob(path.stem + ".*"):
        f.unlink(missing_ok=True)


def _publish(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically, unless the file (the user's) already holds it."""
    try:
        current = read_own_file(path)
    except UntrustedCacheError:
        current = b""                   # a link, or another user's file: replaced
    if current == data:
        return
    damaged = current is not None
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if not damaged:
            try:
                return os.link(tmp, path)  # never replaces a concurrent writer's equal file
            except FileExistsError:
                return
            except OSError:
                pass  # no hard links on this file system
        os.replace(tmp, path)      # numba's files stay valid: their stamp is the source's
    finally:
        Path(tmp).unlink(missing_ok=True)


def _import(path: Path, modname: str, data: bytes) -> ModuleType:
    """Run `data` (the verified contents of `path`) as module `modname`, in `sys.modules` first."""
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    code = compile(data, str(path), "exec", dont_inherit=True)
    # tracebacks and numba's errors show generated lines even if the file is moved or deleted
    # (mtime None: linecache.checkcache keeps the entry; the path's content never changes)
    text = data.decode("utf-8")
    linecache.cache[str(path)] = (len(text), None, text.splitlines(True), str(path))
    sys.modules[modname] = module
    module.__dict__.update((name, importlib.import_module(path)) for name, path in MODULES.items())
    module.__dict__.update(GLOBALS)
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def _is_cache_error(exc: BaseException) -> bool:
    """Whether `exc` was raised inside numba's disk-cache code."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "numba.core.caching":
            return True
        tb = tb.tb_next
    return False


def _counts(fn: Any) -> tuple[int, int]:
    stats = getattr(fn, "stats", None)
    if stats is None:
        return 0, 0
    return sum(stats.cache_misses.values()), sum(stats.cache_hits.values())


class CachedModule:
    """A generated module in the disk cache, loaded; calling it calls its entry function."""

    def __init__(self, source: str, entry: str, digest: str, path: Path,
                 on_disk: bool = True) -> None:
        self.source, self.entry_name, self.digest, self.path = source, entry, digest, path
        self.on_disk = on_disk      # False: the cache directory is unusable (memory only)
        self.modname = path.stem
        self.recoveries = 0
        self._lock = threading.Lock()
        self._base = (0, 0)  # counts of dispatchers replaced by a recovery
        self.fn: Callable[..., Any] = self._load()  # the dispatcher; direct calls skip recovery

    def _load(self) -> Callable[..., Any]:
        from . import numba_files
        numba_files.install(warn_memory_only)
        data = _file_bytes(self.source)
        numba_files.claim(str(self.path), self._machine_code_claim(data))
        module = _import(self.path, self.modname, data)
        numba_files.attach(module)
        return getattr(module, self.entry_name)

    def _machine_code_claim(self, data: bytes) -> Claim | None:
        """Where numba keeps this module's machine code (`__pycache__` beside the module's
        published file) and its key, as a `numba_files.Claim`; None (memory only, with one
        warning) when the disk cannot hold it."""
        from .numba_files import Claim   # (imports numba: not at module level)
        if not self.on_disk:
            return None
        folder = self.path.parent / "__pycache__"
        try:
            key = _open_root().key
            _publish(self.path, data)
        except OSError as err:
            warn_memory_only(self.path.parent, err)
            return None
        try:
            folder = _checked(folder.name)
            if not _writable(folder):
                raise PermissionError("not a writable directory")
        except OSError as err:
            warn_memory_only(folder, err)
            return None
        return Claim(folder, key, hashlib.sha256(data).digest())

    def __call__(self, *args: Any) -> Any:
        fn = self.fn
        try:
            return fn(*args)
        except Exception as exc:
            if not _is_cache_error(exc):
                raise
        return self._recover(fn, args)

    def _recover(self, stale: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Purge numba's files for this module, re-import it and call again."""
        with self._lock:
            if self.fn is stale:  # another thread may have recovered already
                c, d = _counts(stale)
                self._base = (self._base[0] + c, self._base[1] + d)
                _purge(self.path, stale)
                self.fn = self._load()
                self.recoveries += 1
            try:
                return self.fn(*args)
            except Exception as exc:
                if not _is_cache_error(exc):
                    raise
                from numba.core.caching import NullCache
                self.fn._cache = NullCache()  # type: ignore[attr-defined]  # memory only
                return self.fn(*args)

    @property
    def compiles(self) -> int:
        """Signatures compiled (numba cache misses) in this process."""
        return self._base[0] + _counts(self.fn)[0]

    @property
    def disk_loads(self) -> int:
        """Signatures loaded from numba's disk cache in this process."""
        return self._base[1] + _counts(self.fn)[1]


def program_hash(source: str, key: str | None = None) -> str:
    """The content address of a program: 32 hex digits of sha256(source, key)."""
    h = hashlib.sha256(source.encode("utf-8"))
    if key is not None:
        h.update(b"\0" + key.encode("utf-8"))
    return h.hexdigest()[:32]


def load_module(source: str, entry: str, key: str | None = None) -> CachedModule:
    """The module of `source` (one per process and cache dir), written to disk if needed."""
    digest = program_hash(source, key)
    with _load_lock:
        root = _usable_root()
        path = (root or config().cache_dir) / f"tj_{digest}.py"
        module = _modules.get((path, entry))
        if module is None:
            module = _modules[path, entry] = CachedModule(source, entry, digest, path,
                                                          on_disk=root is not None)
        return module


def cache_entries() -> list[CacheEntry]:
    """The programs in the cache, most recently written first: numba's modules and the llvm
    generator's object files (`llvm/obj`, valid when their seal checks)."""
    root, out = cache_root(), []
    for obj in (root / OBJECTS).glob("*") if (root / OBJECTS).is_dir() else ():
        try:
            data, stat = obj.read_bytes(), obj.stat()
        except (FileNotFoundError, IsADirectoryError):
            continue
        valid = unseal(_open_root().key, str(obj), data) is not None
        out.append(CacheEntry(obj.name, obj, stat.st_size, stat.st_mtime, valid))
    for py in root.glob("tj_*.py"):
        try:
            files = [py, *(root / "__pycache__").glob(py.stem + ".*")]
            stats = [f.stat() for f in files]
            valid = _header_ok(py.read_bytes())
        except FileNotFoundError:  # removed concurrently
            continue
        out.append(CacheEntry(py.stem[3:], py, sum(s.st_size for s in stats),
                              max(s.st_mtime for s in stats), valid))
    return sorted(out, key=lambda e: -e.mtime)


def clear_cache() -> int:
    """Delete every program in the versioned cache directory; return how many there were
    (0 when the directory cannot be used: programs are then in memory only)."""
    import shutil
    with _load_lock:
        _modules.clear()
        try:
            root = cache_root()
        except OSError:
            return 0
        count = len(list(root.glob("tj_*.py")))
        objects = root / OBJECTS
        if objects.is_dir() and not objects.is_symlink():
            count += sum(1 for _ in objects.iterdir())
            shutil.rmtree(objects, ignore_errors=True)
        for child in root.iterdir():
            if child.name == OBJECTS.parts[0]:
                continue          # the llvm kernels are library code, kept (compiled once)
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    return count
