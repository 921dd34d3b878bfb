"""tapejit.dask on a local cluster of two worker processes, against one process.

One cluster (`LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`) serves the whole
file; every cluster operation has a hang guard. The workers inherit the environment (the suite's
TAPEJIT_CACHE_DIR, TAPEJIT_FIRST_CALL=compile, TAPEJIT_VERIFY=1), so each compiled call on a
worker is also checked against the interpreter there. This module's functions travel by value
(cloudpickle), as a script's do.
"""
from __future__ import annotations

import concurrent.futures
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads
from tapejit.pytree import flatten

distributed = pytest.importorskip("distributed", reason="needs the extra: pip install -e '.[test]'")
da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")
import tapejit.dask as tjd  # noqa: E402
from hang import HANG_S

cloudpickle.register_pickle_by_value(sys.modules[__name__])
TIMEOUT = HANG_S       # seconds: a hang guard on every cluster operation, never a speed limit
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, scheduler_port=0,
                                       worker_dashboard_address=None)
    client = distributed.Client(cluster, timeout=TIMEOUT)
    client.wait_for_workers(2, timeout=TIMEOUT)
    yield client
    client.close(timeout=TIMEOUT)
    cluster.close(timeout=TIMEOUT)


# ---- the functions (module level: each worker traces them once per signature) -------------
def mlp_mean(p, x, y):
    """A mean over rows (x: (rows, 4), y: (rows, 4); w square, so batch == width collides)."""
    h = np.tanh(x @ p["w"] + p["b"])
    return np.mean(np.sum((h - y) ** 2, axis=1))


def mlp_sum(p, x, y):
    h = np.tanh(x @ p["w"] + p["b"])
    return np.sum((h - y) ** 2)


def mlp_reference(p, x, y, reduce):
    """Value and gradient by hand in numpy (the independent reference)."""
    h = np.tanh(x @ p["w"] + p["b"])
    r = h - y
    scale = 1.0 / len(x) if reduce == "mean" else 1.0
    value = np.sum(r ** 2) * scale
    dz = 2 * r * (1 - h ** 2) * scale
    return value, {"w": x.T @ dz, "b": dz.sum(axis=0)}


def with_aux(p, q, data):
    """Two differentiated arguments, data in a dict, an aux dict reduced like the value."""
    err = data["x"] @ p - data["y"] * q
    return np.mean(err ** 2), {"mean_err": np.mean(err), "mean_y": np.mean(data["y"])}


def odd_rows(w, x):
    """Fails where a chunk has an odd number of rows."""
    return np.sum(x.reshape(-1, 2, x.shape[1]) @ w)


def linear(w, x):
    return np.mean((x @ w) ** 2)


def lotka_volterra(theta, y0):
    """Euler steps of the Lotka-Volterra equations; loss: the final state's squared norm."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]
    u, v = y0[0], y0[1]
    for _ in range(10):
        u, v = u + 0.05 * (a * u - b * u * v), v + 0.05 * (c * u * v - d * v)
    return u ** 2 + v ** 2


def params(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(4, 4)) * 0.5, "b": rng.normal(size=4)}


def data(rows, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 4)), rng.normal(size=(rows, 4))


def close(a, b, tol=1e-10):
    """Same structure, leaves equal to `tol` (relative and absolute)."""
    (la, ta), (lb, tb) = flatten(a), flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


STEPS = {"mean": tjd.value_and_grad(mlp_mean, reduce="mean", timeout=TIMEOUT),
         "sum": tjd.value_and_grad(mlp_sum, reduce="sum", timeout=TIMEOUT)}
ONE = {"mean": tj.value_and_grad(mlp_mean), "sum": tj.value_and_grad(mlp_sum)}


# ---- transforms travel ----------------------------------------------------------------------
def test_transforms_pickle_as_function_and_options():
    x, y = data(4)
    per_row = tj.vmap(tj.grad(linear, backend="interpret"), in_axes=(None, 0), backend="interpret")
    for t, args in [(tj.value_and_grad(mlp_mean, backend="interpret"), (params(0), x, y)),
                    (tj.grad(mlp_mean, backend="interpret"), (params(0), x, y)),
                    (tj.jit(mlp_mean, backend="interpret"), (params(0), x, y)),
                    (per_row, (np.ones(4), x[:, None, :]))]:
        expected = t(*args)
        blob = cloudpickle.dumps(t)
        same = getattr(t, "__wrapped_transform__", t)      # tj.grad's function wraps one
        back = pickle.loads(blob)
        assert getattr(back, "__wrapped_transform__", back) is same   # in its own process
        close(back(*args), expected)
    close(per_row(np.ones(4), x[:, None, :]), 2 * x * (x @ np.ones(4))[:, None])
    child = subprocess.run(
        [sys.executable, "-c", "import pickle, sys, numpy as np; t = pickle.loads("
         "sys.stdin.buffer.read()); print(t.cache_info()['traces'], t(np.ones(2)), "
         "t(np.ones(2)), t.cache_info()['traces'])"],
        input=cloudpickle.dumps(tj.jit(lambda v: np.sum(v * 3.0))), capture_output=True,
        timeout=TIMEOUT, env=dict(os.environ, TAPEJIT_BACKEND="interpret"))
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout.decode().split() == ["0", "6.0", "6.0", "1"]   # empty cache, one trace


def test_import_tapejit_does_not_import_dask_and_no_client_is_explained():
    script = ("import sys, numpy as np, tapejit\n"
              "print(sorted(m for m in sys.modules\n"
              "             if m.split('.')[0] in ('dask', 'distributed')))\n"
              "import tapejit.dask as tjd, dask.array as da\n"
              "try:\n"
              "    tjd.value_and_grad(lambda w, x: np.sum(x @ w))(np.ones(3), da.ones((2, 3)))\n"
              "except tapejit.ArgumentError as e:\n"
              "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[]"
    assert lines[1].startswith("tjd.value_and_grad: no Dask client: start one first")
    assert lines[2] == "  at <string>:6"


def test_workers_trace_once_and_compile_once_per_machine(client):
    step = tjd.value_and_grad(linear, reduce="mean", timeout=TIMEOUT)
    w = np.arange(3.0)
    x = np.random.default_rng(5).normal(size=(6, 3))
    X = da.from_array(x, chunks=(3, 3))
    for k in range(3):
        value, grad = step(w + k, X)
        ref = linear(w + k, x), 2 * x.T @ (x @ (w + k)) / 6
        close((value, grad), ref)
    infos = list(step.worker_cache_info().values())
    assert len(infos) == 2
    assert [i["traces"] for i in infos] == [1, 1]          # once per signature per worker
    assert sum(i["hits"] for i in infos) == 4               # both chunks, steps 2 and 3
    # one machine compiles the program once: the other worker loads it from the disk cache
    assert sum(i["compiles"] for i in infos) <= 1
    assert sum(i["compiles"] + i["disk_loads"] for i in infos) == 2
    assert sum(i["disk_loads"] for i in infos) >= 1


def test_the_compile_lock_is_held_until_a_call_runs_compiled_code(monkeypatch, tmp_path):
    """A small program's first calls run on the interpreter and a later one compiles: a
    worker takes the machine's compile lock around each call of the signature until one ran
    compiled code, then no more."""
    from tapejit import config
    from tapejit.transforms import first_call
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "interpret")
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(first_call, "MAX_INTERPRETED_CALLS", 3)
    config.reload()
    locked = []
    real_open = open
    monkeypatch.setattr(tjd, "open", lambda path, mode: locked.append(1) or real_open(path, mode),
                        raising=False)
    try:
        f = tj.grad(lambda w: np.sum(np.sin(w) * w))
        w = np.arange(3.0)
        key = tjd._signature(f, (w,), {})
        for calls in range(1, 7):
            with tjd._compile_lock(f, key):
                f(w)
            assert len(locked) == min(calls, 4)       # 3 interpreted, the 4th compiles
            assert (key in tjd._ready) == (calls >= 4)
        assert f.cache_info()["interpreted"] == 3 and f.cache_info()["compiles"] == 1
    finally:
        monkeypatch.undo()
        config.reload()


# ---- data-parallel gradients ----------------------------------------------------------------
@pytest.mark.parametrize("reduce", ["mean", "sum"])
@pytest.mark.parametrize("chunks", [(4, 4, 4), (5, 1, 0, 6), (1,)], ids=["equal", "unequal",
                                                                         "one-row"])
def test_matches_one_process(client, reduce, chunks, monkeypatch):
    if chunks == (4, 4, 4):      # the parameters as one graph key (large ones travel so)
        monkeypatch.setattr(tjd, "EMBED_BYTES", 0)
    x, y = data(sum(chunks))
    X, Y = da.from_array(x, chunks=(chunks, 4)), da.from_array(y, chunks=(chunks, 4))
    X, Y = client.persist([X, Y])
    for seed in (0, 1):               # first and later calls, new parameter values
        p = params(seed)
        value, grads = STEPS[reduce](p, X, Y)
        close((value, grads), ONE[reduce](p, x, y))
        close((value, grads), mlp_reference(p, x, y, reduce))
        assert isinstance(grads["w"], np.ndarray) and grads["w"].shape == (4, 4)


def test_chunks_computed_in_blocks_of_rows(client):
    """block_rows smaller than the chunks: each chunk's task adds its blocks' results (a last
    block shorter, a chunk of one block, an empty chunk), weighted by their rows for a mean."""
    chunks = (7, 3, 0, 5)
    x, y = data(sum(chunks))
    X, Y = client.persist([da.from_array(x, chunks=(chunks, 4)),
                           da.from_array(y, chunks=(chunks, 4))])
    for reduce in ("mean", "sum"):
        step = tjd.value_and_grad(STEPS[reduce].fn, reduce=reduce, block_rows=3,
                                  timeout=TIMEOUT)
        for seed in (0, 1):
            close(step(params(seed), X, Y), ONE[reduce](params(seed), x, y))
    # has_aux: the aux means weighted by their blocks' rows too
    d = {"x": X, "y": Y[:, 0]}
    step = tjd.value_and_grad(with_aux, argnums=(0, 1), has_aux=True, block_rows=2,
                              timeout=TIMEOUT)
    p, q = x[0], np.float64(0.5)
    close(step(p, q, d), tj.value_and_grad(with_aux, argnums=(0, 1), has_aux=True)(
        p, q, {"x": x, "y": y[:, 0]}))
    with pytest.raises(tj.ArgumentError, match="block_rows must be a whole number >= 1"):
        tjd.value_and_grad(mlp_mean, block_rows=0)


def test_gradient_against_finite_differences(client):
    x, y = data(7)
    X, Y = da.from_array(x, chunks=(3, 4)), da.from_array(y, chunks=(3, 4))
    p = params(2)
    check_grads(mlp_mean, [p, x, y], argnums=(0,))      # the function itself ...
    close(STEPS["mean"](p, X, Y)[1], tj.grad(mlp_mean)(p, x, y))   # ... and on the cluster


def test_has_aux_argnums_and_data_in_a_pytree(client):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(9, 3)), rng.normal(size=9)
    d = {"x": da.from_array(x, chunks=((2, 3, 4), 3)), "y": da.from_array(y, chunks=((2, 3, 4),))}
    step = tjd.value_and_grad(with_aux, reduce="mean", argnums=(0, 1), has_aux=True,
                              timeout=TIMEOUT)
    p, q = rng.normal(size=3), np.float64(0.5)
    for k in range(2):
        (value, aux), (gp, gq) = step(p + k, q, d)
        expected = tj.value_and_grad(with_aux, argnums=(0, 1), has_aux=True)(
            p + k, q, {"x": x, "y": y})
        close(((value, aux), (gp, gq)), expected)
        err = x @ (p + k) - y * q
        close(aux, {"mean_err": err.mean(), "mean_y": y.mean()})
        close(gq, np.mean(2 * err * -y))


def test_training_with_an_optimizer(client):
    x, y = data(12)
    X, Y = client.persist([da.from_array(x, chunks=(5, 4)), da.from_array(y, chunks=(5, 4))])
    opt = tj.optimizers.Adam(0.05)
    update = tj.jit(opt.step)
    p_dist, p_one = params(4), params(4)
    s_dist, s_one = opt.init(p_dist), opt.init(p_one)
    losses = []
    for _ in range(4):
        value, grads = STEPS["mean"](p_dist, X, Y)
        p_dist, s_dist = update(grads, s_dist, p_dist)
        v_one, g_one = ONE["mean"](p_one, x, y)
        p_one, s_one = update(g_one, s_one, p_one)
        close(value, v_one)
        losses.append(value)
    close(p_dist, p_one)
    assert losses[-1] < losses[0]


def test_a_mean_over_no_rows_is_what_one_process_gives(client):
    x, y = data(0)
    X, Y = da.from_array(x, chunks=(2, 4)), da.from_array(y, chunks=(2, 4))
    with np.errstate(all="ignore"):
        value, grads = STEPS["sum"](params(0), X, Y)
        assert value == 0 and not np.any(grads["w"])
        value, grads = STEPS["mean"](params(0), X, Y)
        expected = ONE["mean"](params(0), x, y)
    assert np.isnan(value) and np.isnan(expected[0])
    assert grads["w"].shape == expected[1]["w"].shape == (4, 4)


# ---- errors ---------------------------------------------------------------------------------
def test_a_failing_chunk_raises_the_tapejit_error_naming_it(client):
    x = np.ones((11, 4))
    step = tjd.value_and_grad(odd_rows, reduce="sum", timeout=TIMEOUT)
    with pytest.raises(tj.ShapeError, match=r"chunk 1 of 3 \(rows 4:7\): reshape: cannot "
                                            r"reshape array of shape \(3, 4\)"):
        step(np.ones(4), da.from_array(x, chunks=((4, 3, 4), 4)))
    value, grad = step(np.ones(4), da.from_array(x[:8], chunks=((4, 2, 2), 4)))   # even: fine
    close((value, grad), (32.0, np.full(4, 8.0)))


def test_bad_arguments_are_explained(client):
    x, y = data(6)
    X, Y = da.from_array(x, chunks=(3, 4)), da.from_array(y, chunks=(2, 4))
    step = STEPS["mean"]
    with pytest.raises(tj.ArgumentError, match=r"row chunks differ: \(3, 3\) .* and \(2, 2, 2\)"
                                               r" .*y.rechunk\(\{0: x.chunks\[0\]\}\)"):
        step(params(0), X, Y)
    with pytest.raises(tj.ArgumentError, match=r"split it along axis 0 only: x.rechunk\(\{1: "
                                               r"-1\}\)"):
        step(params(0), da.from_array(x, chunks=(3, 2)), Y)
    with pytest.raises(tj.ArgumentError, match="no argument is a dask array"):
        step(params(0), x, y)
    with pytest.raises(tj.ArgumentError, match=r"argument 1 \(argnums\) holds dask arrays"):
        tjd.value_and_grad(mlp_mean, argnums=1)(params(0), X, X)
    with pytest.raises(tj.ArgumentError, match="reduce must be 'mean' .* got 'median'"):
        tjd.value_and_grad(mlp_mean, reduce="median")
    with pytest.raises(tj.ArgumentError, match="unknown chunk sizes"):
        step(params(0), X[X[:, 0] > 0], Y[X[:, 0] > 0])


# ---- faults ---------------------------------------------------------------------------------
def slow_rows(block):
    time.sleep(0.6)
    return block


def test_a_worker_killed_mid_step_is_replaced_and_the_step_completes(client):
    x, y = data(16, seed=7)
    # the rows come from slow tasks (as if read from disk), so the step is mid-way when killed
    X = da.from_array(x, chunks=(4, 4)).map_blocks(slow_rows, dtype=x.dtype)
    Y = da.from_array(y, chunks=(4, 4))
    p = params(5)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        step = pool.submit(STEPS["mean"], p, X, Y)
        time.sleep(0.3)
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        close(step.result(timeout=TIMEOUT), mlp_reference(p, x, y, "mean"))
    client.wait_for_workers(2, timeout=TIMEOUT)           # the nanny restarted it
    close(STEPS["mean"](p, X, Y), ONE["mean"](p, x, y))    # and the cluster goes on


# ---- ensembles ------------------------------------------------------------------------------
LV_GRAD = tj.grad(lotka_volterra)
LV_VMAPPED = tj.vmap(LV_GRAD, in_axes=(0, None))


def dot_of(m):
    return {"s": np.sum(m["a"] * m["b"])}


def test_map_ensemble_of_gradients(client):
    rng = np.random.default_rng(9)
    thetas = rng.uniform(0.5, 1.5, size=(10, 4))      # 10 members, batches of 4, 4, 2
    y0 = np.array([1.0, 0.5])
    grads = tjd.map(LV_GRAD, thetas, batch=4, shared=(y0,), timeout=TIMEOUT)
    assert grads.shape == (10, 4)
    for theta, g in zip(thetas, grads):
        close(g, LV_GRAD(theta, y0))
    close(tjd.map(LV_GRAD, thetas, shared=(y0,), timeout=TIMEOUT), grads)  # default: 3, 3, 3, 1
    check_grads(lotka_volterra, [thetas[3], y0], argnums=(0,))
    values = tjd.map(tj.jit(lotka_volterra), thetas, batch=3, shared=(y0,), timeout=TIMEOUT)
    close(values, np.array([lotka_volterra(t, y0) for t in thetas]))   # plain Python
    # batched: fn (tj.vmap-ed) takes the whole batch; pytrees of members
    vmapped = tjd.map(LV_VMAPPED, thetas, batch=4, shared=(y0,), batched=True, timeout=TIMEOUT)
    close(vmapped, grads)
    batched = tjd.map(tj.vmap(dot_of), {"a": thetas, "b": thetas[::-1]}, batch=3,
                      batched=True, timeout=TIMEOUT)
    close(batched, {"s": np.sum(thetas * thetas[::-1], axis=1)})


def test_map_errors(client):
    with pytest.raises(tj.ArgumentError, match=r"all of one length; got shapes \(3, 4\), "
                                               r"\(2,\)"):
        tjd.map(LV_GRAD, np.ones((3, 4)), np.ones(2))
    with pytest.raises(tj.ArgumentError, match="no members"):
        tjd.map(LV_GRAD, np.ones((0, 4)))
    with pytest.raises(tj.ShapeError, match=r"batch 0 of 1 \(members 0:2\)"):
        tjd.map(tj.grad(odd_rows), np.ones((2, 4)), shared=(np.ones((3, 4)),), batch=2,
                timeout=TIMEOUT)


def test_example_trains_on_the_cluster():
    """examples/dask_training.py --quick end to end (its own cluster, on the interpreter: the
    compiled path on workers is what the tests above check)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TAPEJIT_BACKEND="interpret")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "dask_training.py"),
                          "--quick"], capture_output=True, text=True, timeout=HANG_S, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("dataset: 20,000 rows x 16 features, 3 MB on disk in 8 chunks; "
                               "2 workers")
    losses = [float(line.split("loss ")[1].split()[0]) for line in lines[1:3]]
    assert lines[1].startswith("epoch 1/2  loss ") and lines[2].startswith("epoch 2/2  loss ")
    assert "2 steps of 10,000 rows" in lines[2]
    assert losses[1] < losses[0]
    assert lines[3].startswith("workers traced the step 2 times")
