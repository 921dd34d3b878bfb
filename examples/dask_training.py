"""Train an MLP on a dataset stored as a dask array, on a Dask cluster (tapejit.dask).

The dataset (rows of 16 features and a target) is written to disk as a stack of .npy chunks
(`da.to_npy_stack`), larger than the memory limit of any one worker; the workers read the
chunks they are given, so no process ever holds the whole set. Each step's gradient is computed
where the chunks are read (`tjd.value_and_grad(loss, reduce="mean")`) and summed on the
cluster; the client applies a `tj.optimizers.Adam` update (`tj.jit`) and prints a progress line
per epoch.

    python examples/dask_training.py                 # 2 local workers, 4M rows (544 MB)
    python examples/dask_training.py --quick         # a smoke test: 20,000 rows, 2 epochs
    python examples/dask_training.py --scheduler tcp://host:8786   # a running cluster (the
                                    # workers must see --data, a shared directory)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tapejit as tj
import tapejit.dask as tjd

FEATURES, HIDDEN = 16, 32


def loss(params, x, y):
    """Mean squared error of a 16-32-1 tanh MLP: a mean over rows."""
    h = np.tanh(x @ params["w1"] + params["b1"])
    pred = h @ params["w2"] + params["b2"]
    return np.mean((pred - y) ** 2)


def make_dataset(path: str, rows: int, chunk: int) -> None:
    """A regression set (a fixed random teacher network plus noise), written chunk by chunk on
    the workers."""
    import dask.array as da
    rng = da.random.default_rng(0)
    x = rng.standard_normal((rows, FEATURES), chunks=(chunk, FEATURES))
    teacher = np.random.default_rng(1).standard_normal(FEATURES) / np.sqrt(FEATURES)
    y = np.sin(3 * x @ teacher) + 0.1 * rng.standard_normal(rows, chunks=chunk)
    da.to_npy_stack(os.path.join(path, "x"), x)
    da.to_npy_stack(os.path.join(path, "y"), y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--chunk", type=int, default=100_000, help="rows per chunk")
    ap.add_argument("--batch-chunks", type=int, default=4, help="chunks per step")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler", help="address of a running scheduler (default: a local "
                                        "cluster)")
    ap.add_argument("--data", help="directory for the dataset (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="20,000 rows, 2 epochs")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.chunk, a.epochs = 20_000, 2_500, 2

    import dask.array as da
    from distributed import Client, LocalCluster

    nbytes = a.rows * (FEATURES + 1) * 8
    limit = max(nbytes // 2, 512 * 2 ** 20)        # below the dataset, above a worker's needs
    if a.scheduler:
        client, cluster = Client(a.scheduler), None
    else:
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                               memory_limit=limit, dashboard_address=None)
        client = Client(cluster)
    workers = len(client.scheduler_info()["workers"])
    with tempfile.TemporaryDirectory() as tmp:
        path = a.data or tmp
        if not os.path.exists(os.path.join(path, "x")):
            make_dataset(path, a.rows, a.chunk)
        X, Y = da.from_npy_stack(os.path.join(path, "x")), da.from_npy_stack(
            os.path.join(path, "y"))
        print(f"dataset: {X.shape[0]:,} rows x {FEATURES} features, {nbytes / 2 ** 20:,.0f} MB "
              f"on disk in {X.numblocks[0]} chunks; {workers} workers, "
              f"{limit / 2 ** 20:,.0f} MB memory limit each")

        rng = np.random.default_rng(0)
        params = {"w1": rng.normal(size=(FEATURES, HIDDEN)) / np.sqrt(FEATURES),
                  "b1": np.zeros(HIDDEN), "w2": rng.normal(size=HIDDEN) / np.sqrt(HIDDEN),
                  "b2": np.zeros(())}
        opt = tj.optimizers.Adam(a.lr)
        state = opt.init(params)
        update = tj.jit(opt.step)
        step = tjd.value_and_grad(loss, reduce="mean", client=client)
        rows_per_step = a.chunk * a.batch_chunks
        for epoch in range(1, a.epochs + 1):
            start, losses = time.perf_counter(), []
            for lo in range(0, a.rows, rows_per_step):
                value, grads = step(params, X[lo:lo + rows_per_step], Y[lo:lo + rows_per_step])
                params, state = update(grads, state, params)
                losses.append(value)
            took = time.perf_counter() - start
            print(f"epoch {epoch}/{a.epochs}  loss {np.mean(losses):.4f}  {len(losses)} steps "
                  f"of {rows_per_step:,} rows  {took:.1f} s  "
                  f"({a.rows / took:,.0f} rows/s)", flush=True)
        info = step.worker_cache_info()
        print("workers traced the step", sum(i["traces"] for i in info.values()), "times, "
              "compiled it", sum(i["compiles"] for i in info.values()), "times, loaded it "
              "from the disk cache", sum(i["disk_loads"] for i in info.values()), "times")
    client.close()
    if cluster is not None:
        cluster.close()


if __name__ == "__main__":
    main()
