"""The build stages remembered on disk (disk/memo.py): a new transform of the same function (as
a new process would make) reads the derived program and the generated module instead of making
them, and gets the same results; anything the digest cannot spell out exactly is not
remembered."""
import pickle

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.disk import memo
from tapejit.transforms import sharing
from tapejit.ir import Eqn, Lit, Tape, Var
from tapejit.avals import Aval


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    config.reload()
    yield tmp_path / "cache"
    monkeypatch.undo()
    config.reload()


def loss(w, x):
    h = np.tanh(x @ w)
    for _ in range(12):                 # a plain loop: re-rolled into a scan
        h = h * 0.5 + np.sin(h)
    return np.sum(h * h)


def _fresh_grad():
    sharing.forget()                    # as in a new process: nothing shared in memory
    return tj.grad(loss)


def _args(n=3):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, n)), rng.normal(size=(n, n))


def test_a_new_transform_reads_the_stages_and_agrees(own_cache):
    w, x = _args()
    first = _fresh_grad()
    want = first(w, x)
    before = memo.hits()
    again = _fresh_grad()
    got = again(w, x)
    after = memo.hits()
    assert after.get("derive", 0) == before.get("derive", 0) + 1
    assert after.get("generate", 0) == before.get("generate", 0) + 1
    np.testing.assert_array_equal(got, want)
    # the loop re-rolled is counted as when it was derived
    assert again.cache_info()["rerolled"] == first.cache_info()["rerolled"] == 1
    # another shape is another program: derived anew, and right
    w1, x1 = _args(1)
    hits = memo.hits().get("derive", 0)
    got = _fresh_grad()(w1, x1)
    assert memo.hits().get("derive", 0) == hits
    np.testing.assert_allclose(got, tj.grad(loss, backend="interpret")(w1, x1))


def test_a_program_read_from_the_stages_returns_an_input_itself(own_cache):
    """Its tape's dtypes are numpy's builtin ones (an unpickled dtype is a new instance, and
    np.asarray(x, dtype=it) made a view: an identity program from disk returned a copy). The
    program returns the input itself; the transform gives the caller a copy of it."""
    x, y = np.arange(6.0), np.arange(6.0, 12.0)
    before = memo.hits().get("derive", 0)
    for made in range(2):               # traced and compiled, then read from disk
        sharing.forget()
        f = tj.jit(lambda v: (v, v * 2))
        first, second = f(x)[0], f(y)[0]
        np.testing.assert_array_equal(first, x)
        np.testing.assert_array_equal(second, y)
        [program] = f._cache.values()
        assert program.run([x])[0] is x, made
    assert memo.hits().get("derive", 0) == before + 1
    assert pickle.loads(pickle.dumps(Aval((2,), np.dtype(np.float32)))).dtype is \
        np.dtype(np.float32)


def test_a_planted_stage_is_not_read(own_cache):
    w, x = _args()
    want = _fresh_grad()(w, x)
    files = [p for p in own_cache.rglob("*") if p.is_file() and "memo" in p.parts]
    assert files
    for path in files:                  # a file not sealed with the user's key
        path.write_bytes(b"planted")
    hits = memo.hits().get("derive", 0)
    np.testing.assert_array_equal(_fresh_grad()(w, x), want)
    assert memo.hits().get("derive", 0) == hits


F64 = Aval((3,), np.dtype(np.float64))


def _tape(param=2, src=("f.py", 1), const=np.arange(3.0)):
    x, c, y = Var("x", F64), Var("c1", F64), Var("v1", F64)
    eqn = Eqn("mul", (x, c), (y,), (("k", param),), src)
    return Tape((x,), (eqn,), (y,), (c,), (const,))


def test_the_digest_spells_out_every_part():
    base = memo.digest(_tape())
    assert base == memo.digest(_tape()) and base is not None
    different = [_tape(param=2.0), _tape(param=True), _tape(param=(2,)),
                 _tape(src=("f.py", 2)), _tape(src=("g.py", 1)),
                 _tape(const=np.arange(3.0) + 1e-16 * 4), _tape(const=np.arange(3.0, dtype="f4")),
                 _tape(param=np.dtype("f4")), _tape(param=np.dtype("f8")),
                 _tape(param=np.float32(2)), _tape(param=(np.dtype("f4"), np.array([2])))]
    keys = [memo.digest(t) for t in different]
    assert None not in keys and len({base, *keys}) == len(keys) + 1
    assert memo.digest(_tape(), ("gradient", (0,))) != memo.digest(_tape(), ("gradient", (1,)))
    lit = Tape((Var("x", F64),), (), (Lit(1, Aval((), np.dtype(np.int64))),))
    assert memo.digest(lit) != memo.digest(
        Tape((Var("x", F64),), (), (Lit(1.0, Aval((), np.dtype(np.int64))),)))


def test_what_has_no_exact_spelling_is_not_remembered():
    assert memo.digest(_tape(param=len)) is None                      # a function
    assert memo.digest(_tape(param=object())) is None
    assert memo.digest(_tape(param=np.array([None]))) is None         # objects
    big = np.zeros(memo.CONST_BYTES // 8 + 1)
    x, c, y = Var("x", F64), Var("c1", Aval(big.shape, big.dtype)), Var("v1", F64)
    assert memo.digest(Tape((x,), (), (x,), (c,), (big,))) is None
    made = []
    assert memo.remembered("test", None, lambda: made.append(1) or 7) == 7
    assert made == [1]


def test_a_cache_directory_that_cannot_be_used_runs_the_stage(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(blocked))
    config.reload()
    try:
        assert memo.remembered("test", "0" * 40, lambda: 11) == 11
    finally:
        monkeypatch.undo()
        config.reload()
