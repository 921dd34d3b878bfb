"""What the disk cache trusts: directories only the user can write, and files sealed with the
user's key. store.py, numba_files.py, memo.py and the llvm generator's object cache
(codegen/llvm/jit.py) read and write the cache through this module only.

    root = open_root(base, tag)      # -> Root(path, key): <base>/<tag>, checked; the key read
    folder = checked_dir(base, tag, "__pycache__")   # any directory under the base, checked
    data = seal(key, path, payload); payload = unseal(key, path, data)   # None: not authentic
    data = read_own_file(path)       # bytes of a regular file of the user's, read once
    write_atomic(path, data)         # a new private file, renamed into place

Directories (`checked_dir`). Symbolic links above the base are resolved once; from there the
path is opened one directory at a time from `/`, each with O_DIRECTORY|O_NOFOLLOW relative to
its parent's descriptor, so a link from the base down (or one swapped in above it meanwhile)
is refused rather than followed, and what is checked is what the path names. Directories
above the base must belong to the user or to root and not be writable by
others (group-writable is allowed for the user's own private group: named as the user, no
other member), unless sticky like /tmp (nobody else can rename or remove the user's entries).
The base and every directory under it must belong to the user and not be writable by group or
others; missing ones are created 0o700, and those under the base are made 0o700. Nobody but
the user and root can then change anything on the path, so the paths checked stay safe to use.
A refusal raises `UntrustedCacheError`, naming the directory and what to do. A process
remembers what it checked: the next check of a path compares each directory on it, and the
key file, with what the walk found (`os.lstat`: device, inode, owner, group, mode; the
key's size and time too), and walks again where anything differs.

Files. A key of 32 random bytes lives in `<base>/key`, created 0o600 (O_EXCL|O_NOFOLLOW, then
hard-linked into place, so no process reads half a key); on every read it must be a regular
file of the user's, readable by nobody else, of 32 bytes, or the cache is refused. Every file
the cache loads is read once into memory (O_NOFOLLOW|O_NONBLOCK: a link or a FIFO is no file;
it must belong to the user), its HMAC-SHA256 (over its file name and contents) checked, and only
those bytes are unpickled or run: replacing a file after the check changes nothing.
On platforms without O_NOFOLLOW and directory descriptors the cache is refused.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import NamedTuple

from ..errors import TapejitError

MAGIC = b"tapejit sealed file 1\n"
KEY_NAME = "key"
KEY_BYTES = 32
_MAC_BYTES = hashlib.sha256().digest_size
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_SUPPORTED = bool(_NOFOLLOW) and os.open in os.supports_dir_fd and hasattr(os, "geteuid")


class UntrustedCacheError(TapejitError, PermissionError):
    """A cache directory or key file that another user could have written (or replaced)."""


class Root(NamedTuple):
    path: Path    # <base>/<tag>, checked
    key: bytes    # the user's key, from <base>/key


def _refuse(path: str, why: str, fix: str) -> UntrustedCacheError:
    return UntrustedCacheError(f"{path} {why}: the cache trusts only what you alone could have "
                               f"written; {fix}")


def _private_group(gid: int) -> bool:
    """Whether `gid` is the user's private group (named as the user, no other member)."""
    try:
        import grp
        import pwd
        user, group = pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


def _check(st: os.stat_result, path: str, ancestor: bool) -> None:
    """Refuse a directory (the module docstring's rules)."""
    me = os.geteuid()
    if st.st_uid != me and not (ancestor and st.st_uid == 0):
        raise _refuse(path, f"belongs to user {st.st_uid}, not to you ({me})",
                      "set TAPEJIT_CACHE_DIR to a directory of your own")
    others = st.st_mode & 0o022
    if others == 0o020 and _private_group(st.st_gid):
        others = 0
    if others and not (ancestor and st.st_mode & stat.S_ISVTX):
        raise _refuse(path, f"is writable by other users (mode {oct(stat.S_IMODE(st.st_mode))})",
                      f"make it writable by you alone (chmod go-w {path}), or set "
                      f"TAPEJIT_CACHE_DIR to a directory of your own")


def _open_dir(parent: int, name: str, path: str) -> int:
    """Open directory `name` under the descriptor `parent`, creating it (0o700) if missing."""
    for _ in range(2):
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
        except OSError as err:
            if os.path.islink(path):
                raise _refuse(path, "is a symbolic link", "remove the link (tapejit makes a "
                              "private directory there), or set TAPEJIT_CACHE_DIR to the "
                              "directory itself") from None
            raise
    return os.open(name, _DIR, dir_fd=parent)


def _walk(base: Path, inner: tuple[str, ...]) -> tuple[int, int, Path]:
    """Descriptors of the base and of the last of `inner` under it, both checked."""
    if not _SUPPORTED:
        raise UntrustedCacheError("this platform cannot open directories without following "
                                  "symbolic links (O_NOFOLLOW): the disk cache is off")
    base = Path(os.path.abspath(base))
    real = Path(os.path.realpath(base.parent)) / base.name     # the base itself: no link
    names = (*real.parts[1:], *inner)
    first_own = len(real.parts) - 2           # the base's index in `names`
    fd, base_fd, path = os.open("/", _DIR), -1, Path("/")
    try:
        _check(os.fstat(fd), "/", ancestor=True)
        for i, name in enumerate(names):
            path = path / name
            child = _open_dir(fd, name, str(path))
            if fd != base_fd:
                os.close(fd)
            fd = child
            st = os.fstat(fd)
            _check(st, str(path), ancestor=i < first_own)
            if i == first_own:
                base_fd = fd
            elif i > first_own and stat.S_IMODE(st.st_mode) != 0o700:
                os.fchmod(fd, 0o700)
        return base_fd, fd, path
    except BaseException:
        for f in {fd, base_fd} - {-1}:
            os.close(f)
        raise


# (base, inner, with the key) -> (the directory, the paths a later check compares: each
# directory from it up to `/` [and the key file], their identities, the key)
_CHECKED: dict[tuple[Path, tuple[str, ...], bool], tuple[Path, tuple, tuple, bytes | None]] = {}


def _identity(path: str) -> tuple | None:
    """What changes when a directory or file is replaced, or its owner or mode changes (and a
    file's contents: its size and time; a directory's change with every file written)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    seen = st.st_dev, st.st_ino, st.st_uid, st.st_gid, st.st_mode
    return seen if stat.S_ISDIR(st.st_mode) else (*seen, st.st_size, st.st_mtime_ns)


def _checked(base: Path, inner: tuple[str, ...], with_key: bool) -> tuple[Path, bytes | None]:
    """The walk's directory (and the key, `with_key`), from this process's memory where
    nothing on the way changed since it checked them."""
    remembered = _CHECKED.get((base, inner, with_key))
    if remembered is not None:
        path, compared, identities, key = remembered
        if tuple(map(_identity, compared)) == identities:
            return path, key
    base_fd, fd, path = _walk(base, inner)
    key = None
    try:
        if with_key:
            key = _read_key(base_fd, path.parent / KEY_NAME)
    finally:
        os.close(fd)
        if base_fd != fd:
            os.close(base_fd)
    key_file = (path.parent / KEY_NAME,) if with_key else ()
    compared = tuple(map(str, (path, *path.parents, *key_file)))
    _CHECKED[(base, inner, with_key)] = (path, compared, tuple(map(_identity, compared)), key)
    return path, key


def checked_dir(base: Path, *inner: str) -> Path:
    """The directory `base/inner...`, created if missing, after checking it and every
    directory on the way (the module docstring); raises UntrustedCacheError or OSError."""
    return _checked(Path(os.path.abspath(base)), inner, False)[0]


def open_root(base: Path, tag: str) -> Root:
    """The versioned directory `base/tag`, checked, and the user's key."""
    path, key = _checked(Path(os.path.abspath(base)), (tag,), True)
    return Root(path, key)


def _read_key(base_fd: int, where: Path) -> bytes:
    """The key in the base (opened as `base_fd`), made first if there is none."""
    try:
        fd = os.open(KEY_NAME, _FILE, dir_fd=base_fd)
    except FileNotFoundError:
        _make_key(base_fd)
        fd = os.open(KEY_NAME, _FILE, dir_fd=base_fd)
    except OSError as err:
        raise _refuse(str(where), f"cannot be opened as a file ({err.strerror})",
                      "delete it: tapejit makes a new key") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise _refuse(str(where), f"is not a private file of yours (owner {st.st_uid}, "
                      f"mode {oct(st.st_mode)})", "delete it: tapejit makes a new key")
    with os.fdopen(fd, "rb") as f:
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise _refuse(str(where), f"holds {len(key)} bytes, not a key of {KEY_BYTES}",
                      "delete it: tapejit makes a new key")
    return key


def _make_key(base_fd: int) -> None:
    """Write a new key beside the base's other files and link it into place, unless another
    process did first."""
    tmp = f".key-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=base_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, KEY_NAME, src_dir_fd=base_fd, dst_dir_fd=base_fd)
        except FileExistsError:
            pass                                    # another process made one: use it
        except OSError:                             # no hard links on this file system
            os.rename(tmp, KEY_NAME, src_dir_fd=base_fd, dst_dir_fd=base_fd)
    finally:
        try:
            os.unlink(tmp, dir_fd=base_fd)
        except FileNotFoundError:
            pass


def _mac(key: bytes, path: str, payload: bytes) -> bytes:
    return hmac.new(key, os.path.basename(path).encode() + b"\0" + payload, "sha256").digest()


def seal(key: bytes, path: str, payload: bytes) -> bytes:
    """The contents of a cache file at `path` holding `payload`: a header, the MAC (of the
    file's name and the payload), the payload."""
    return MAGIC + _mac(key, path, payload) + payload


def unseal(key: bytes, path: str, data: bytes) -> bytes | None:
    """The payload of sealed `data` read from `path`, or None if it is not authentic."""
    head, mac = len(MAGIC), data[len(MAGIC):len(MAGIC) + _MAC_BYTES]
    payload = data[head + _MAC_BYTES:]
    if data[:head] != MAGIC or len(mac) != _MAC_BYTES:
        return None
    return payload if hmac.compare_digest(mac, _mac(key, path, payload)) else None


def read_own_file(path: str | Path) -> bytes | None:
    """The bytes of the regular file at `path`, read once; None when it is missing; raises
    UntrustedCacheError when it is a link, not a regular file, or another user's."""
    try:
        fd = os.open(path, _FILE)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _refuse(str(path), f"cannot be opened as a file ({err.strerror})",
                      "it is deleted") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise _refuse(str(path), f"is not a file of yours (owner {st.st_uid}, mode "
                      f"{oct(st.st_mode)})", "it is deleted")
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replace the file at `path` by a new private one holding `data`, atomically."""
    tmp = f"{path}.tmp-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_sealed(root: Root, name: str) -> bytes | None:
    """What the sealed file `name` in `root` holds: None where no authentic file of the user's
    is there (a link or another user's file included)."""
    path = root.path / name
    try:
        data = read_own_file(path)
    except UntrustedCacheError:
        return None
    return None if data is None else unseal(root.key, str(path), data)


def write_sealed(root: Root, name: str, payload: bytes) -> None:
    """Keep `payload` as the sealed file `name` in `root`, replaced atomically; raises
    OSError where it cannot be written."""
    path = root.path / name
    write_atomic(path, seal(root.key, str(path), payload))
