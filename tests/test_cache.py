"""The disk cache of generated programs: content addressing, recovery, threads, processes.

Every test counts events (compiles, disk loads, recoveries, files); none asserts on timings.
A fresh `cache.Program` on an existing file stands in for a new process (a new module and a
new dispatcher that reads numba's files from disk); real subprocesses are kept to three.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

numba = pytest.importorskip("numba")

from tapejit import cache  # noqa: E402
from tapejit.config import config, reload as reload_config  # noqa: E402


def gen_source(c: float, body: str = "return x * {c}") -> str:
    """A tiny hand-written 'generated' module; a distinct `c` gives a distinct program."""
    return ("import numba\n\n\n@numba.njit(cache=True)\ndef entry(x):\n    "
            + body.format(c=repr(float(c))) + "\n")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "tjcache"
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(d))
    reload_config()
    yield d
    monkeypatch.undo()
    reload_config()


def fresh(prog: cache.Program) -> cache.Program:
    """The same program as a new process would load it: new module, new dispatcher."""
    return cache.Program(prog.source, prog.entry_name, prog.digest, prog.path)


def numba_files(prog: cache.Program, suffix: str) -> list:
    return sorted((prog.path.parent / "__pycache__").glob(f"{prog.modname}.*{suffix}"))


SUBPROCESS = """
import sys
from tapejit.cache import load_program
p = load_program(sys.argv[1], "entry")
print(p(2.0), p.compiles, p.disk_loads, p.recoveries)
"""


def spawn(source: str, cache_dir) -> subprocess.Popen:
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", SUBPROCESS, source], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> list[str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out.split()


def test_same_source_loads_one_module(cache_dir):
    src = gen_source(2.0)
    p = cache.load_program(src, "entry")
    assert cache.load_program(src, "entry") is p
    assert sys.modules[p.modname].entry is p.fn
    assert (p(3.0), p(4.0)) == (6.0, 8.0)
    assert (p.compiles, p.disk_loads, p.recoveries) == (1, 0, 0)
    assert [e.path for e in cache.cache_entries()] == [p.path]
    assert p.path.read_text().endswith(src)


def test_key_and_source_are_the_address(cache_dir):
    src = gen_source(2.25)
    a, b = cache.load_program(src, "entry"), cache.load_program(src, "entry", key="opts")
    c = cache.load_program(gen_source(2.5), "entry")
    assert len({a.path, b.path, c.path}) == 3
    assert a.digest == cache.program_hash(src) != cache.program_hash(src, "opts") == b.digest


def test_new_signature_compiles_once_more(cache_dir):
    p = cache.load_program(gen_source(2.75), "entry")
    assert p(1.0) == 2.75 and p(2) == 5.5 and p(3) == 8.25
    assert (p.compiles, p.disk_loads) == (2, 0)
    q = fresh(p)
    assert q(1.0) == 2.75 and q(2) == 5.5
    assert (q.compiles, q.disk_loads) == (0, 2)


def test_fresh_process_loads_from_disk(cache_dir):
    src = gen_source(3.0)
    p = cache.load_program(src, "entry")
    assert p(2.0) == 6.0 and p.compiles == 1
    assert finish(spawn(src, cache_dir)) == ["6.0", "0", "1", "0"]


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path):
    path.write_bytes(bytes(range(256)) * (path.stat().st_size // 256 + 1))


def _empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [_truncate, _garbage, _empty])
@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_damaged_numba_files_are_rebuilt(cache_dir, suffix, damage):
    kinds = [_truncate, _garbage, _empty]
    c = 4.0 + 0.125 * [".nbi", ".nbc"].index(suffix) + 0.25 * kinds.index(damage)
    p = cache.load_program(gen_source(c), "entry")
    assert p(2.0) == 2 * c
    [f] = numba_files(p, suffix)
    damage(f)
    q = fresh(p)
    assert q(2.0) == 2 * c
    assert (q.compiles, q.disk_loads, q.recoveries) == (1, 0, 1)
    r = fresh(p)  # the rebuilt files are sound
    assert r(2.0) == 2 * c
    assert (r.compiles, r.disk_loads, r.recoveries) == (0, 1, 0)


def test_cache_that_stays_broken_compiles_in_memory(cache_dir, monkeypatch):
    p = cache.load_program(gen_source(5.0), "entry")
    p(1.0)
    [f] = numba_files(p, ".nbi")
    _garbage(f)
    monkeypatch.setattr(cache, "_purge", lambda *a: None)  # the damage survives the purge
    q = fresh(p)
    assert q(2.0) == 10.0 and q(3.0) == 15.0
    assert (q.compiles, q.recoveries) == (1, 1)


def test_errors_of_the_program_are_not_cache_errors(cache_dir):
    src = gen_source(5.5, "if x < 0:\n        raise ValueError('negative')\n    return x * {c}")
    p = cache.load_program(src, "entry")
    assert p(2.0) == 11.0
    with pytest.raises(ValueError, match="negative"):
        p(-1.0)
    with pytest.raises(numba.core.errors.TypingError):
        p("a string")
    assert p.recoveries == 0 and len(numba_files(p, ".nbc")) == 1


@pytest.mark.parametrize("damage", [_truncate, _garbage])
def test_damaged_py_is_replaced(cache_dir, damage):
    c = 6.0 + 0.5 * [_truncate, _garbage].index(damage)
    p = cache.load_program(gen_source(c), "entry")
    p(1.0)
    damage(p.path)
    assert [e.valid for e in cache.cache_entries()] == [False]
    q = fresh(p)
    assert q(2.0) == 2 * c and q.compiles == 1
    assert p.path.read_text().endswith(p.source)
    assert [e.valid for e in cache.cache_entries()] == [True]


def test_valid_py_is_never_rewritten(cache_dir):
    p = cache.load_program(gen_source(7.0), "entry")
    p(1.0)
    before = p.path.stat()
    q = fresh(p)
    after = p.path.stat()
    assert (before.st_ino, before.st_mtime_ns, before.st_size) == \
        (after.st_ino, after.st_mtime_ns, after.st_size)
    assert q(1.0) == 7.0 and q.disk_loads == 1
    assert not list(p.path.parent.glob(".tmp-*"))


def test_eight_threads_first_call_compile_once(cache_dir):
    src, n = gen_source(8.0), 8
    barrier, results, progs = threading.Barrier(n), [None] * n, [None] * n

    def work(i):
        barrier.wait()
        progs[i] = cache.load_program(src, "entry")
        results[i] = progs[i](float(i))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [8.0 * i for i in range(n)]
    assert all(p is progs[0] for p in progs)
    assert (progs[0].compiles, progs[0].disk_loads) == (1, 0)


def test_two_processes_fill_an_empty_cache(cache_dir):
    src = gen_source(9.0)
    procs = [spawn(src, cache_dir) for _ in range(2)]
    outs = [finish(p) for p in procs]
    assert all(o[0] == "18.0" and int(o[1]) + int(o[2]) == 1 and o[3] == "0" for o in outs)
    [entry] = cache.cache_entries()
    assert entry.valid and entry.hash == cache.program_hash(src)
    p = cache.load_program(src, "entry")
    assert len(numba_files(p, ".nbi")) == 1 and len(numba_files(p, ".nbc")) == 1
    assert p(2.0) == 18.0 and (p.compiles, p.disk_loads) == (0, 1)
    assert not list(p.path.parent.glob(".tmp-*"))


def test_cache_dir_is_private_and_versioned(cache_dir):
    root = cache.cache_root()
    assert root.parent == cache_dir
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert f"numba{numba.__version__}" in root.name and sys.implementation.cache_tag in root.name


def test_existing_cache_dir_is_made_private(cache_dir):
    (cache_dir / cache._tag()).mkdir(parents=True, mode=0o755)
    assert stat.S_IMODE(cache.cache_root().stat().st_mode) == 0o700


def test_cache_dir_of_another_user_is_refused(cache_dir, monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache_dir.parent).st_uid + 1)
    with pytest.raises(PermissionError, match="another user"):
        cache.cache_root()


def test_entries_and_clear(cache_dir):
    p = cache.load_program(gen_source(10.0), "entry")
    p(1.0)
    [e] = cache.cache_entries()
    assert e.hash == p.digest and e.valid
    assert e.size > p.path.stat().st_size  # numba's index and object code count too
    assert cache.clear_cache() == 1
    assert cache.cache_entries() == [] and list(cache.cache_root().iterdir()) == []
    assert p(2.0) == 20.0  # a program already loaded keeps working
    q = cache.load_program(gen_source(10.0), "entry")
    assert q is not p and q(2.0) == 20.0 and q.compiles == 1


def test_config_reads_the_environment(monkeypatch, tmp_path):
    for name in ("TAPEJIT_CACHE_DIR", "TAPEJIT_DUMP", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TAPEJIT_DISABLE_JIT", "1")
    monkeypatch.setenv("TAPEJIT_PARALLEL", "0")
    c = reload_config()
    assert config() is c
    assert c.cache_dir == tmp_path / ".cache" / "tapejit"
    assert (c.disable_jit, c.parallel, c.dump_dir) == (True, False, None)
    monkeypatch.setenv("TAPEJIT_DUMP", str(tmp_path / "dump"))
    monkeypatch.setenv("TAPEJIT_PARALLEL", "yes")
    monkeypatch.setenv("TAPEJIT_DISABLE_JIT", "")
    c = reload_config()
    assert (c.disable_jit, c.parallel, c.dump_dir) == (False, True, tmp_path / "dump")
    monkeypatch.undo()
    reload_config()
