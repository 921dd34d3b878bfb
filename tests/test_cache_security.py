"""The disk cache trusts only what the user could have written (issue 33).

The attack reported: a cache base shared by a team (writable by others) holds a symbolic link
that points the versioned directory back at the base, and numba index files whose pickles run
code, each with a matching `.sha256` sidecar (a plain hash anyone can compute). The victim's
next ordinary run executed the planted code. Each test here plants files the way an attacker
would (as another user, `nobody`, where the tests run as root), runs the victim's program in a
new process and checks that no planted pickle ran (each would create a marker directory), that
the results are right, and what the cache did (compiles, disk loads, warnings). Tests count
events, not time.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import pytest
from hang import HANG_S

numba = pytest.importorskip("numba")

import tapejit as tj  # noqa: E402
from tapejit.disk import numba_files, store, trust  # noqa: E402
from tapejit.config import reload as reload_config  # noqa: E402

NOBODY = 65534
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

VICTIM = """
import sys, warnings, numpy as np, tapejit as tj
f = tj.jit(lambda x: np.sum(np.sin(x) * x), backend="numba")
x = np.linspace(0.0, 1.0, 5)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    errors = [abs(f(x) - np.sum(np.sin(x) * x)) for _ in range(3)]
info = f.cache_info()
said = [str(w.message) for w in caught if issubclass(w.category, tj.TapejitWarning)]
print(max(errors), info["compiles"], info["disk_loads"], len(said))
print("\\n".join(said), file=sys.stderr)
"""


class Mkdir:
    """Pickles as a call of os.mkdir: unpickling it creates a marker directory."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return os.mkdir, (self.path,)


class Victim:
    """The user's ordinary program, run in new processes on one cache base."""

    codegen = "numba"    # numba's files are the ones planted (the llvm generator's sealed
                         # files: tests/test_llvm_jit.py)

    def __init__(self, base: Path, markers: Path, prelude: str = "") -> None:
        self.base, self.markers, self.prelude = base, markers, prelude

    def run(self) -> tuple[int, int, int, str]:
        """(compiles, disk loads, TapejitWarnings, their text) of a run with right results
        in which no planted pickle ran."""
        env = dict(os.environ, TAPEJIT_CACHE_DIR=str(self.base), TAPEJIT_BACKEND="numba",
                   TAPEJIT_FIRST_CALL="compile", TAPEJIT_CODEGEN=self.codegen)
        env.pop("TAPEJIT_VERIFY", None)
        done = subprocess.run([sys.executable, "-c", self.prelude + VICTIM], env=env,
                              capture_output=True, text=True, timeout=HANG_S)
        assert done.returncode == 0, done.stderr       # a crash is a negative return code
        error, compiles, loads, warned = done.stdout.split()
        assert float(error) < 1e-12
        assert not list(self.markers.iterdir()), "a planted pickle ran"
        return int(compiles), int(loads), int(warned), done.stderr

    def refuses(self, why: str) -> None:
        """The victim's run warns once (saying `why`) and compiles in memory only."""
        compiles, loads, warned, said = self.run()
        assert (compiles, loads, warned) == (1, 0, 1), said
        assert why in said and "in memory only" in said, said

    def loads(self) -> None:
        """The victim's run loads the program from the disk cache, with no warning."""
        assert self.run()[:3] == (0, 1, 0)


@pytest.fixture(scope="module")
def names(tmp_path_factory) -> list[str]:
    """The victim's numba files, relative to the versioned directory (what an attacker learns
    by running the same program once)."""
    scratch = tmp_path_factory.mktemp("scratch")
    markers = tmp_path_factory.mktemp("unused-markers")
    Victim(scratch, markers).run()
    [root] = scratch.glob("*/")
    found = [p.relative_to(root).as_posix() for p in root.rglob("*.nb[ic]")]
    assert any(n.startswith("__pycache__/tj_") for n in found)
    assert any(n.startswith("lib/vmath/") for n in found)
    return found


@pytest.fixture
def place(names):
    """A directory every user can reach (/tmp/tj-...: 0o755), removed afterwards: its
    `markers` folder is where planted pickles would leave their marks, other users make
    their own directories in `public` (0o1777, like /tmp)."""
    top = Path(tempfile.mkdtemp(prefix="tj-security-", dir="/tmp"))
    os.chmod(top, 0o755)
    for name, mode in (("markers", 0o777), ("public", 0o1777)):
        (top / name).mkdir()
        os.chmod(top / name, mode)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def as_other_user(work, *args) -> None:
    """Run `work(*args)` as `nobody` in a forked child (as the user where not root)."""
    if not AS_ROOT:
        work(*args)
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.umask(0)
            work(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def plant(folder: Path, names: list[str], markers: Path) -> None:
    """Put each numba file of `names` under `folder` (replacing what is there) as a pickle
    that makes a marker directory when loaded, with a matching sha256 sidecar."""
    for i, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o777)
        data = pickle.dumps(Mkdir(markers / str(i)))
        for target, content in ((path, data), (Path(f"{path}.sha256"),
                                               hashlib.sha256(data).hexdigest().encode())):
            Path(f"{target}.new").write_bytes(content)
            os.replace(f"{target}.new", target)


def tag() -> str:
    return store._tag()


def victim_with_cache(place: Path) -> tuple[Victim, Path]:
    """The victim, with a private cache base that holds the program (one run)."""
    victim = Victim(place / "private", place / "markers")
    assert victim.run()[:3] == (1, 0, 0)
    return victim, place / "private" / tag()


# ---- the attack reported, and its variants -----------------------------------------------------
def test_shared_base_with_versioned_dir_linked_back_at_it(place, names):
    """The report: a shared base (0o1777, the victim's), the versioned directory a symbolic
    link to the base, planted index and object pickles with forged sidecars."""
    base = place / "shared"
    base.mkdir()
    os.chmod(base, 0o1777)

    versioned = base / tag()

    def attack():
        os.symlink(".", versioned)
        plant(base, names, place / "markers")

    as_other_user(attack)
    Victim(base, place / "markers").refuses("writable by other users")


def test_versioned_dir_linked_to_another_users_dir(place, names):
    victim, root = victim_with_cache(place)
    evil = place / "public" / "evil"
    as_other_user(lambda: (evil.mkdir(mode=0o777), plant(evil, names, place / "markers")))
    shutil.rmtree(root)
    os.symlink(evil, root)
    victim.refuses("is a symbolic link")


def test_lib_dir_linked_to_another_users_dir(place, names):
    """tapejit's own helpers (lib/vmath), which a program being compiled loads, refused."""
    victim, root = victim_with_cache(place)
    evil = place / "public" / "evil"
    helpers = [n[len("lib/"):] for n in names if n.startswith("lib/")]
    as_other_user(lambda: (evil.mkdir(mode=0o777), plant(evil, helpers, place / "markers")))
    shutil.rmtree(root / "lib")
    shutil.rmtree(root / "__pycache__")             # the program compiles again
    os.symlink(evil, root / "lib")
    victim.refuses(f"{root / 'lib'} is a symbolic link")


@pytest.mark.parametrize("shared", ["", ".", "__pycache__", "lib"])
def test_world_writable_dir_on_the_way(place, names, shared):
    """The base (""), the versioned directory (".") or one under it made writable by all, as
    team caches often are (the others readable): another user moves the directories in it
    aside and puts theirs there, or replaces the files in it, with planted pickles. The
    victim refuses that directory."""
    victim, root = victim_with_cache(place)
    writable = root / shared if shared else place / "private"
    for folder in [place / "private", *(p for p in root.rglob("*") if p.is_dir()), root]:
        os.chmod(folder, 0o755)
    os.chmod(writable, 0o777)

    def attack():
        for child in writable.iterdir():
            if child.is_dir():
                os.rename(child, f"{child}.old")
        plant(root, [n for n in names if shared in ("", ".") or n.startswith(shared + "/")],
              place / "markers")

    as_other_user(attack)
    if shared == "lib":                 # the program compiles again, loading the helpers
        shutil.rmtree(root / "__pycache__")
    victim.refuses(f"{writable} is writable by other users")


def _rewrite(root: Path, names: list[str], markers: Path, owner: str) -> None:
    """Every numba file under `root` rewritten with its sidecar: a planted pickle, or the
    same file with one bit flipped in the middle (machine code that could crash)."""
    plant(root, [n for n in names if n.endswith(".nbi")], markers)
    for name in (n for n in names if n.endswith(".nbc")):
        data = bytearray((root / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (root / name).write_bytes(bytes(data))
        Path(f"{root / name}.sha256").write_text(hashlib.sha256(data).hexdigest())
    if owner == "nobody":
        for name in names:
            os.chown(root / name, NOBODY, NOBODY)


@pytest.mark.parametrize("owner", ["nobody", "the user"])
def test_numba_files_and_sidecars_rewritten(place, names, owner):
    """No directory open to others, but every index (a planted pickle) and object file (a
    flipped bit) rewritten with a matching sidecar, by another user or (e.g. copied from
    elsewhere) owned by the user: none is loaded, all are rebuilt."""
    if owner == "nobody" and not AS_ROOT:
        pytest.skip("only root can give files to another user")
    victim, root = victim_with_cache(place)
    _rewrite(root, names, place / "markers", owner)
    assert victim.run()[:3] == (1, 0, 0)       # recompiled: nothing planted was read
    victim.loads()                             # the rebuilt files are sound


SWAP = """
import os, tapejit.disk.numba_files as nc
read = nc.read_own_file
def read_then_swap(path):
    data = read(path)          # what the cache checks and loads; the file is replaced next
    if data is not None:
        with open(f"{path}.new", "wb") as f:
            f.write(bytes.fromhex(os.environ["PLANTED"]))
        os.replace(f"{path}.new", path)
    return data
nc.read_own_file = read_then_swap
"""


def test_file_swapped_between_check_and_load(place, names, monkeypatch):
    """Each numba file is replaced by a planted pickle right after the cache read it: the
    bytes checked are the bytes loaded (the program loads from disk), nothing planted runs."""
    victim, root = victim_with_cache(place)
    monkeypatch.setenv("PLANTED", pickle.dumps(Mkdir(place / "markers" / "swap")).hex())
    Victim(victim.base, victim.markers, prelude=SWAP).loads()
    assert victim.run()[:3] == (1, 0, 0)      # the planted files: refused, rebuilt


@pytest.mark.parametrize("owner", ["nobody", "the user"])
def test_planted_generated_module(place, names, owner):
    """A `tj_<hash>.py` replaced by code that would make a marker, with a header matching its
    body: never run (the module runs from the source tapejit generates), and replaced."""
    if owner == "nobody" and not AS_ROOT:
        pytest.skip("only root can give files to another user")
    victim, root = victim_with_cache(place)
    [module] = root.glob("tj_*.py")
    body = f"import os\nos.mkdir({str(place / 'markers' / 'py')!r})\n".encode()
    module.write_bytes(store._HEADER.encode() + hashlib.sha256(body).hexdigest().encode()
                       + b"\n" + body)
    if owner == "nobody":
        os.chown(module, NOBODY, NOBODY)
    victim.loads()
    assert b"os.mkdir" not in module.read_bytes() and module.stat().st_uid == os.geteuid()


# ---- the key, the seal and the directory rules, in this process ------------------------------
@pytest.fixture
def base(tmp_path, monkeypatch):
    """TAPEJIT_CACHE_DIR at tmp/base (not created)."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "base"))
    monkeypatch.setattr(store, "_warned", set())
    reload_config()
    yield tmp_path / "base"
    monkeypatch.undo()
    reload_config()


def source(c: float) -> str:
    return f"import numba\n\n\n@numba.njit(cache=True)\ndef entry(x):\n    return x * {c!r}\n"


def test_key_is_private_made_once_and_kept(base):
    root = trust.open_root(base, tag())
    st = (base / "key").stat()
    assert len(root.key) == 32 and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid() and trust.open_root(base, tag()).key == root.key
    assert stat.S_IMODE(base.stat().st_mode) == 0o700 == stat.S_IMODE(root.path.stat().st_mode)
    assert sorted(p.name for p in base.iterdir()) == ["key", tag()]   # no temporary file left


def _chown_nobody(f: Path) -> None:
    if not AS_ROOT:
        pytest.skip("only root can give a file to another user")
    os.chown(f, NOBODY, NOBODY)


BAD_KEYS = {
    "readable by others": lambda f: os.chmod(f, 0o640),
    "another user's": _chown_nobody,
    "a symbolic link": lambda f: (f.rename(f.with_name("real")), f.symlink_to("real")),
    "short": lambda f: f.write_bytes(b"k" * 16),
    "a directory": lambda f: (f.unlink(), f.mkdir()),
}


@pytest.mark.parametrize("damage", BAD_KEYS)
def test_bad_key_file_refuses_the_cache(base, damage):
    """A program still runs right, compiled in memory, with one warning naming the key."""
    trust.open_root(base, tag())
    BAD_KEYS[damage](base / "key")
    with pytest.raises(trust.UntrustedCacheError, match="key"):
        trust.open_root(base, tag())
    c = 11.0 + list(BAD_KEYS).index(damage)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = store.load_module(source(c), "entry")
        assert program(2.0) == 2 * c and program.compiles == 1
    said = [str(w.message) for w in caught if issubclass(w.category, tj.TapejitWarning)]
    assert len(said) == 1 and f"{base / 'key'} " in said[0] and "in memory only" in said[0]


def test_seal_binds_the_key_the_file_name_and_every_byte():
    key, path = b"k" * 32, "/c/v/__pycache__/tj_1.entry-5.py311.nbi"
    sealed = trust.seal(key, path, b"payload")
    assert trust.unseal(key, "/elsewhere/tj_1.entry-5.py311.nbi", sealed) == b"payload"
    assert trust.unseal(b"o" * 32, path, sealed) is None
    assert trust.unseal(key, "/c/v/__pycache__/tj_2.entry-5.py311.nbi", sealed) is None
    for i in range(len(sealed)):
        flipped = bytearray(sealed)
        flipped[i] ^= 0x01
        assert trust.unseal(key, path, bytes(flipped)) is None
    for n in range(len(sealed)):
        assert trust.unseal(key, path, sealed[:n]) is None


def test_directories_above_the_base(tmp_path):
    """Made 0o700 where missing; one writable by others refused unless sticky (like /tmp);
    links above the base resolved, the base itself no link."""
    made = trust.checked_dir(tmp_path / "a" / "b" / "base", "x")
    assert made == tmp_path / "a" / "b" / "base" / "x"
    for p in (tmp_path / "a", tmp_path / "a" / "b", made.parent, made):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700
    os.chmod(tmp_path / "a", 0o777)
    with pytest.raises(trust.UntrustedCacheError, match=r"/a is writable by other users"):
        trust.checked_dir(tmp_path / "a" / "b" / "base")
    os.chmod(tmp_path / "a", 0o1777)
    assert trust.checked_dir(tmp_path / "a" / "b" / "base") == made.parent
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert trust.checked_dir(tmp_path / "link" / "b" / "base") == made.parent
    (tmp_path / "base-link").symlink_to(made.parent)
    with pytest.raises(trust.UntrustedCacheError, match="base-link is a symbolic link"):
        trust.checked_dir(tmp_path / "base-link")


def test_directory_of_another_user_above_the_base(tmp_path):
    if not AS_ROOT:
        pytest.skip("only root can give a directory to another user")
    (tmp_path / "theirs").mkdir(mode=0o755)
    os.chown(tmp_path / "theirs", NOBODY, NOBODY)
    with pytest.raises(trust.UntrustedCacheError, match=f"theirs belongs to user {NOBODY}"):
        trust.checked_dir(tmp_path / "theirs" / "base")


def test_checks_happen_at_load_never_per_call(base, monkeypatch):
    program = store.load_module(source(20.0), "entry")
    assert program(1.0) == 20.0                           # compiled, and saved sealed
    checks: list[str] = []

    def counted(module, name):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a: checks.append(name) or real(*a))

    monkeypatch.setattr(trust, "_CHECKED", {})             # as a new process loads it
    counted(trust, "_walk")
    counted(numba_files, "unseal")
    loaded = store.CachedModule(program.source, "entry", program.digest, program.path)
    assert loaded(2.0) == 40.0 and loaded.disk_loads == 1
    assert "_walk" in checks and "unseal" in checks
    at_load = len(checks)
    for i in range(100):
        assert loaded(float(i)) == 20.0 * i
    assert len(checks) == at_load


def test_a_process_checks_again_what_changed(tmp_path, monkeypatch):
    """A path checked before is not walked again while nothing on it changed; a directory on
    the way (above the base too) or the key changed, replaced or removed is checked again,
    and refused where it must be."""
    base = tmp_path / "a" / "base"
    root = trust.open_root(base, tag())
    walks: list[tuple] = []
    real = trust._walk
    monkeypatch.setattr(trust, "_walk", lambda *a: walks.append(a) or real(*a))
    assert trust.open_root(base, tag()) == root and trust.checked_dir(base, tag()) == root.path
    assert len(walks) == 1                     # checked_dir: a walk of its own, once
    (root.path / "written").write_bytes(b"x")     # the cache's own writes change nothing
    assert trust.open_root(base, tag()) == root and len(walks) == 1
    os.chmod(tmp_path / "a", 0o777)
    for check in (lambda: trust.open_root(base, tag()), lambda: trust.checked_dir(base, tag())):
        with pytest.raises(trust.UntrustedCacheError, match="/a is writable by other users"):
            check()
    os.chmod(tmp_path / "a", 0o700)
    assert trust.open_root(base, tag()) == root
    os.chmod(base / "key", 0o644)
    with pytest.raises(trust.UntrustedCacheError, match="key"):
        trust.open_root(base, tag())
    (base / "key").unlink()                    # a new key: read, not the one remembered
    assert trust.open_root(base, tag()).key not in (root.key, None)
    shutil.rmtree(root.path)                   # made again
    assert trust.checked_dir(base, tag()) == root.path and root.path.is_dir()
    os.rename(root.path, tmp_path / "moved")
    (tmp_path / "elsewhere").mkdir(mode=0o777)
    os.symlink(tmp_path / "elsewhere", root.path)
    with pytest.raises(trust.UntrustedCacheError, match="is a symbolic link"):
        trust.checked_dir(base, tag())


def test_cli_names_a_refused_cache_dir(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(shared))
    done = subprocess.run([sys.executable, "-m", "tapejit", "cache", "list"], env=env,
                          capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 1 and f"{shared} is writable by other users" in done.stderr
    assert f"chmod go-w {shared}" in done.stderr


def test_group_writable_only_for_the_users_private_group(tmp_path):
    """A directory writable by the user's own private group (named as the user, no other
    member: common with umask 002) is trusted; writable by another group, it is not."""
    if not AS_ROOT:
        pytest.skip("only root can give a directory to another group")
    folder = tmp_path / "team"
    folder.mkdir()
    os.chmod(folder, 0o770)                      # root's group: root, no other member
    assert trust.checked_dir(folder / "base") == folder / "base"
    os.chown(folder, 0, NOBODY)                  # nogroup
    with pytest.raises(trust.UntrustedCacheError, match="team is writable by other"):
        trust.checked_dir(folder / "base")
