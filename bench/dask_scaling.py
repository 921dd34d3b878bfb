"""Scale-out on Dask (issue 23): tapejit.dask against tapejit in one process, on local clusters.

Not pinned: this script sets TAPEJIT_BENCH_CPUS=all before importing the harness (the clusters'
workers need every core). Workers are processes with one thread each (Dask's nanny sets
OMP_NUM_THREADS=1 in them, so tapejit's thread budget there is 1).

1. MLP gradient on 10^6 rows (32-64-1 tanh MLP, mean squared error, float64): tapejit in this
   process with default threading (every core), and with one thread, against
   `tjd.value_and_grad` on a LocalCluster of 2 worker processes (the rows persisted on the
   workers in 4 chunks, 2 on each worker; each chunk's task calls the program on blocks of
   tjd.BLOCK_ROWS rows), and, for comparison, one process on the same blocks of rows (what
   blocking alone gains). Taking turns in every repeat. Goal: 2 workers <= 0.60x one process.
2. Per-step overhead: the same step on 8 rows in 2 chunks (and in 32 chunks, for the cost per
   task), next to a bare Dask round trip (`client.submit(int, 1).result()`). Goal: <= 10 ms.
3. An ensemble of 4,096 Lotka-Volterra gradients (`tjd.map(tj.grad(f), thetas)`, its default
   batch; 10,000 explicit Euler steps in a `tj.fori_loop`) on a 1-worker and a 2-worker
   cluster, taking turns. Goal: 2 workers >= 1.70x faster.
4. Bytes per step (pickled sizes: what goes from the client, what comes back; what the workers
   send, to each other and to the client, from Dask's transfer counters) and a projection for
   64 machines from those and the measured overhead (the model of docs/distributed.md).

    .venv/bin/python bench/dask_scaling.py [--repeats 7] [--quick]
"""
from __future__ import annotations

import os

os.environ["TAPEJIT_BENCH_CPUS"] = "all"   # read by the harness on import: do not pin

import _harness as H  # noqa: E402  first: before numpy is imported

import pickle  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import tapejit as tj  # noqa: E402

FEATURES, HIDDEN = 32, 64
LV_STEPS = 10_000


def loss(p, x, y):
    h = np.tanh(x @ p["w1"] + p["b1"])
    return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def lotka_volterra(theta, y0):
    """Final-state squared norm after LV_STEPS explicit Euler steps of Lotka-Volterra."""
    def body(i, s):
        u, v = s
        return (u + 0.001 * (theta[0] * u - theta[1] * u * v),
                v + 0.001 * (theta[2] * u * v - theta[3] * v))
    u, v = tj.fori_loop(0, LV_STEPS, body, (y0[0], y0[1]))
    return u ** 2 + v ** 2


def turns(fns: dict, repeats: int) -> dict:
    """Median seconds of each function, calling them in turn in every repeat."""
    runs: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            runs[k].append(time.perf_counter() - t0)
    return {k: H.Timing.of(v) for k, v in runs.items()}


def make_rows(seed: int, n: int) -> tuple:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, FEATURES))
    return x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(n)


def rows_on_workers(client, rows: int, chunks: int) -> tuple:
    """X (rows x FEATURES) and Y (rows) as dask arrays whose row chunks are made on the
    workers in turn, so each worker holds as many, persisted (as a dataset a training loop
    reads step after step; unpersisted, each step would rerun the tasks assembling them),
    and their numpy copies, fetched chunk by chunk (computing X whole would copy every chunk
    to one worker, which could then run any chunk's task)."""
    import operator

    import dask
    import dask.array as da
    workers = sorted(client.scheduler_info()["workers"])
    n = rows // chunks
    made = [client.submit(make_rows, i, n, workers=[workers[i % len(workers)]], pure=False)
            for i in range(chunks)]
    parts = [[client.submit(operator.getitem, m, j, workers=[workers[i % len(workers)]])
              for i, m in enumerate(made)] for j in (0, 1)]
    X = da.concatenate([da.from_delayed(dask.delayed(p), (n, FEATURES), np.float64)
                        for p in parts[0]])
    Y = da.concatenate([da.from_delayed(dask.delayed(p), (n,), np.float64) for p in parts[1]])
    X, Y = client.persist([X, Y])
    return X, Y, np.concatenate(client.gather(parts[0])), np.concatenate(client.gather(parts[1]))


def transferred(client) -> int:
    """Bytes the workers have sent so far (Dask's counters of get_data: to each other and
    to the client's gathers)."""
    def sent(dask_worker):
        return dask_worker.transfer_outgoing_bytes_total
    return sum(client.run(sent).values())


def main() -> None:
    parser = H.make_parser(__doc__)
    args = H.parse_args(parser)
    H.print_header("Scale-out on Dask: data-parallel gradients and ensembles", args)
    import dask.array as da
    import cloudpickle
    from distributed import Client, LocalCluster
    import tapejit.dask as tjd

    rows = 100_000 if args.quick else 1_000_000
    members = 512 if args.quick else 4096

    def cluster(n):
        c = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                         dashboard_address=":0", memory_limit="2GiB")
        return c, Client(c)

    c2, client2 = cluster(2)
    rng = np.random.default_rng(0)
    p = {"w1": rng.normal(size=(FEATURES, HIDDEN)) / np.sqrt(FEATURES), "b1": np.zeros(HIDDEN),
         "w2": rng.normal(size=HIDDEN) / np.sqrt(HIDDEN), "b2": np.zeros(())}
    # the rows are made on the workers (not sent from here), two chunks on each (where Dask
    # placed the random chunks of da.random, it put all four on one worker), then copied here
    X, Y, x, y = rows_on_workers(client2, rows, chunks=4)

    # 1. MLP gradient on `rows` rows
    one = tj.value_and_grad(loss)
    step = tjd.value_and_grad(loss, reduce="mean", client=client2, timeout=600)
    want = one(p, x, y)
    for _ in range(3):                         # first calls: trace, compile, disk loads
        got = step(p, X, Y)
    one(p, x, y)
    H.check_close("tjd.value_and_grad vs one process", got, want, rtol=1e-9)

    def one_thread():
        before = tj.get_num_threads()
        tj.set_num_threads(1)
        try:
            one(p, x, y)
        finally:
            tj.set_num_threads(before)

    def one_in_blocks():
        """One process, summing the mean's value and gradient over blocks of rows as each
        chunk's task does."""
        total = None
        for start in range(0, rows, tjd.BLOCK_ROWS):
            n = min(tjd.BLOCK_ROWS, rows - start)
            out = one(p, x[start:start + n], y[start:start + n])
            out = tj.pytree.tree_map(lambda v: v * (n / rows), out)
            total = out if total is None else tj.pytree.tree_map(np.add, total, out)
        return total

    H.check_close("one process in blocks vs in one call", one_in_blocks(), want, rtol=1e-9)
    t = turns({"one": lambda: one(p, x, y), "one1": one_thread, "blocks": one_in_blocks,
               "dask": lambda: step(p, X, Y)}, args.repeats)
    t_dask = t["dask"].median
    threads = H.threads_text(tj.get_num_threads())
    table = H.Table(f"MLP {FEATURES}-{HIDDEN}-1 value and gradient, {rows:,} rows",
                    ref="tapejit, one process")
    table.add(f"tapejit.dask, 2 workers x 1 thread (4 chunks, blocks of {tjd.BLOCK_ROWS:,} "
              f"rows)", t["dask"], goal="<= 0.60x")
    table.add(f"tapejit, one process ({threads})", t["one"])
    table.add("tapejit, one process (1 thread)", t["one1"])
    table.add(f"tapejit, one process ({threads}, blocks of {tjd.BLOCK_ROWS:,} rows)",
              t["blocks"])
    table.print()
    H.ratio_line("2 workers / one process (default threads)", t["dask"].median,
                 t["one"].median, goal=0.60, record={"workload": "dask MLP 1e6 rows"})
    H.ratio_line("2 workers / one process (1 thread)", t["dask"].median, t["one1"].median)
    H.ratio_line("2 workers / one process in the same blocks", t["dask"].median,
                 t["blocks"].median)

    # 2. per-step overhead on tiny data
    xs, ys = x[:8], y[:8]
    tiny = [da.from_array(xs, chunks=(4, FEATURES)), da.from_array(ys, chunks=4)]
    tiny = client2.persist(tiny)
    many = client2.persist([da.from_array(x[:64], chunks=(2, FEATURES)),
                            da.from_array(y[:64], chunks=2)])
    for _ in range(3):
        step(p, *tiny)
        step(p, *many)
    repeats = max(args.repeats, 5) * 4
    t = turns({"bare": lambda: client2.submit(int, 1, pure=False).result(),
               "step": lambda: step(p, *tiny), "many": lambda: step(p, *many),
               "local": lambda: one(p, xs, ys)}, repeats)
    overhead = t["step"].median - t["local"].median
    per_task = (t["many"].median - t["step"].median) / (tasks(32)[0] - tasks(2)[0])
    table = H.Table("per-step overhead (8 rows)", ref="bare Dask round trip")
    table.add(f"tjd step, 2 chunks ({tasks(2)[0]} tasks)", t["step"], goal="<= 10 ms")
    table.add(f"tjd step, 32 chunks ({tasks(32)[0]} tasks)", t["many"])
    table.add("bare Dask round trip (one task)", t["bare"])
    table.add("tapejit, one process, 8 rows", t["local"])
    table.print()
    print(f"overhead of a step: {overhead * 1e3:.1f} ms; each further task: "
          f"{per_task * 1e3:.2f} ms")
    H.ratio_line("step overhead / 10 ms", overhead, 0.010, goal=1.0,
                 record={"workload": "dask step overhead"})

    # 4. bytes per step (the 10^6-row step)
    payload = len(cloudpickle.dumps((step.transform, p)))
    result = len(pickle.dumps(got))
    before = transferred(client2)
    n = 5
    for _ in range(n):
        step(p, X, Y)
    between = (transferred(client2) - before) / n
    print(f"bytes per step: parameters and transform {payload:,} B (pickled); result "
          f"{result:,} B each partial sum; sent by the workers {between:,.0f} B (the partial "
          f"sums to the client, and to additions; a chunk, if work stealing moved one)")

    # 3. ensemble of Lotka-Volterra gradients: 1 worker against 2
    c1, client1 = cluster(1)
    g = tj.grad(lotka_volterra)
    thetas = rng.uniform(0.5, 1.5, size=(members, 4))
    y0 = np.array([1.0, 0.5])
    ref = np.array([g(th, y0) for th in thetas[:8]])
    for c in (client1, client2):
        out = tjd.map(g, thetas, shared=(y0,), client=c, timeout=600)
        H.check_close("tjd.map vs one process", out[:8], ref, rtol=1e-12)
    t = turns({"w1": lambda: tjd.map(g, thetas, shared=(y0,), client=client1),
               "w2": lambda: tjd.map(g, thetas, shared=(y0,), client=client2)},
              args.repeats)
    t0 = time.perf_counter()
    for th in thetas[:256]:
        g(th, y0)
    per_gradient = (time.perf_counter() - t0) / 256
    table = H.Table(f"ensemble: {members:,} Lotka-Volterra gradients ({LV_STEPS} Euler steps)",
                    ref="1 worker")
    table.add("2 workers", t["w2"], goal=">= 1.70x faster")
    table.add("1 worker", t["w1"])
    table.print()
    print(f"one gradient in this process: {per_gradient * 1e6:.0f} us "
          f"({members * per_gradient:.2f} s for the ensemble on one core)")
    H.ratio_line("speed-up 2 workers / 1 worker", t["w1"].median, t["w2"].median, goal=1.70,
                 lower_is_better=False, record={"workload": "dask LV ensemble"})

    # projection: 64 machines, weak scaling (the measured rows per machine, 2 workers each)
    project(compute=t_dask - overhead, overhead=overhead, per_task=per_task, payload=payload,
            result=result, rows=rows)
    for c in (client1, client2):
        c.close()
    c1.close()
    c2.close()


def project(compute: float, overhead: float, per_task: float, payload: int, result: int,
            rows: int, machines: int = 64, latency: float = 100e-6,
            bandwidth: float = 1.25e9) -> None:
    """Print docs/distributed.md's cost model for `machines` machines of 2 workers, each with
    `rows` rows (weak scaling), from this machine's measurements."""
    workers = 2 * machines
    n, depth = tasks(2 * workers)
    terms = {
        "compute (measured here, per machine)": compute,
        "round trip (measured here)": overhead,
        f"scheduler: {n} tasks x {per_task * 1e3:.2f} ms": n * per_task,
        f"parameters to {workers - 1} more workers, from one holder": (
            (workers - 1) * payload / bandwidth),
        f"{depth} levels of additions, the last on the client": (
            depth * (latency + fan_bytes(result) / bandwidth)),
    }
    total = sum(terms.values())
    print(f"projection: {machines} machines x 2 workers, {rows:,} rows each ({machines * rows:,}"
          f" rows), a network of {bandwidth * 8 / 1e9:.0f} Gb/s and {latency * 1e3:.1f} ms "
          f"a hop:")
    for what, seconds in terms.items():
        print(f"  {what:<58} {seconds * 1e3:9.1f} ms")
    print(f"  {'step':<58} {total * 1e3:9.1f} ms   ({machines * rows / total:,.0f} rows/s, "
          f"{compute / total:.0%} of it computing; one machine: {rows / (compute + overhead):,.0f}"
          f" rows/s)")


def tasks(chunks: int) -> tuple[int, int]:
    """The tasks of a step of `chunks` chunks (the chunks and the additions, FAN_IN at a time,
    down to FAN_IN partial sums) and the levels of additions (the last one on the client)."""
    import tapejit.dask as tjd
    n, level, depth = chunks, chunks, 0
    while level > tjd.FAN_IN:
        level = -(-level // tjd.FAN_IN)
        n, depth = n + level, depth + 1
    return n, depth + (chunks > 1)


def fan_bytes(result: int) -> int:
    """Bytes one addition receives: FAN_IN partial results."""
    import tapejit.dask as tjd
    return tjd.FAN_IN * result


if __name__ == "__main__":
    main()
