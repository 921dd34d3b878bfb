"""Scale-out on Dask: data-parallel gradients and ensembles on a `dask.distributed` cluster.

    import tapejit.dask as tjd
    step = tjd.value_and_grad(loss, reduce="mean")      # loss(params, x, y): a mean over rows
    value, grads = step(params, X, Y)                   # X, Y: dask arrays chunked along axis 0
    outs = tjd.map(tj.grad(f), thetas)                  # f on each row of thetas, stacked

Dask does the work: its scheduler places each chunk's task where the chunk lives, ships
functions with cloudpickle, moves data between workers and reruns the tasks of a worker that
died. A step is one graph: the transform and the arguments that are not dask arrays (the
parameters: sent once per step; inside each chunk's task when small, else one key that each
worker fetches), one task per row chunk (the chunk's value and gradient, times its rows for a
mean, computed BLOCK_ROWS rows at a time) and a tree of additions down to at most FAN_IN
partial sums, which the client adds: it receives at most FAN_IN pytrees, whatever the number
of chunks, and waits one hop less than for a last addition task. A transform is pickled once (as its function and options,
dispatch.py), not per task; a worker unpickles it once, traces it once per signature and
loads the compiled program from its disk cache (TAPEJIT_CACHE_DIR). Needs the extra
`tapejit[dask]`; importing this module imports dask, `import tapejit` does not.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .api import value_and_grad as _value_and_grad
from .disk.store import cache_root
from .errors import ArgumentError, TapejitError, at_source, user_source
from .pytree import flatten, tree_map, unflatten

try:
    import dask
    import dask.array as da
    import distributed
except ImportError as e:          # pragma: no cover - exercised without the extra
    raise ImportError("tapejit.dask needs dask.distributed: pip install 'tapejit[dask]'") from e

__all__ = ["value_and_grad", "map"]

REDUCE = ("mean", "sum")
FAN_IN = 4     # partial results one addition task sums
# parameters up to this size travel inside each chunk's task (one hop less per step); larger
# ones as one graph key that each worker fetches once
EMBED_BYTES = 64 * 1024
# rows of one call of the program inside a chunk's task (tjd.value_and_grad's block_rows): a
# 32-64-1 MLP's gradient on 250,000 rows on one thread took 121 ms in blocks of 16,384 rows
# against 154 ms in one call (its hidden activations stay in cache); compute-bound programs
# (784-256 wide) and narrow ones (8-16) ran the same either way
BLOCK_ROWS = 16384
# tjd.map's default batch: this many tasks per worker (4,096 Lotka-Volterra gradients, 2 workers
# against 1, medians of 9 in turns: 1.78x in 1 task per worker, 1.81x in 2, 1.73x in 4)
TASKS_PER_WORKER = 2


class _Payload:
    """What every task of one step or map shares: the function, the arguments that are not
    mapped, where the mapped ones go. (Not a tuple: a tuple that starts with a callable is a
    task in a Dask graph.)"""

    def __init__(self, fn: Callable[..., Any], treedef: Any, shared: list[Any],
                 mapped: Sequence[int], option: Any, fn_blob: bytes | None = None) -> None:
        self.fn, self.treedef, self.shared, self.mapped, self.option = (
            fn, treedef, shared, tuple(mapped), option)
        self.fn_blob = fn_blob

    def __reduce__(self) -> tuple:
        """Pickled with cloudpickle whatever pickler Dask uses (it tries plain pickle first,
        which sends functions by reference): so a script's functions, and a module's under
        `cloudpickle.register_pickle_by_value`, travel by value. The function is pickled once
        (`fn_blob`, made by the caller for all of a step's tasks) and unpickled once per
        worker process (`_function`); the arguments travel with each payload."""
        import cloudpickle
        blob = self.fn_blob if self.fn_blob is not None else cloudpickle.dumps(self.fn)
        return _loads, (blob, cloudpickle.dumps((self.treedef, self.shared, self.mapped,
                                                 self.option)))

    def call_args(self, parts: Sequence[Any]) -> tuple[tuple, dict]:
        """The arguments with `parts` (chunks, batches) in the mapped leaves' places."""
        leaves = list(self.shared)
        for k, part in zip(self.mapped, parts):
            leaves.insert(k, part)
        args, kwargs = unflatten(self.treedef, leaves)
        return args, kwargs


@functools.lru_cache(maxsize=32)
def _function(blob: bytes) -> Callable[..., Any]:
    """The function pickled as `blob`, unpickled once per process: a worker getting the same
    transform step after step reuses it (and its traces and programs)."""
    import cloudpickle
    return cloudpickle.loads(blob)


def _loads(fn_blob: bytes, blob: bytes) -> _Payload:
    import cloudpickle
    return _Payload(_function(fn_blob), *cloudpickle.loads(blob), fn_blob=fn_blob)


def _client(client: Any, who: str) -> Any:
    if client is not None:
        return client
    try:
        return distributed.get_client()
    except ValueError:
        raise ArgumentError(at_source(
            f"{who}: no Dask client: start one first (`Client(LocalCluster())`, or "
            f"`Client('tcp://scheduler:8786')` for a running cluster) or pass client=",
            user_source())) from None


_ready: set[tuple] = set()     # (transform, signature)s whose calls here run compiled code


def _signature(fn: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The key `_compile_lock` knows calls of `fn` with arguments like these by (None: `fn`
    is not a tapejit transform)."""
    if not hasattr(fn, "cache_info"):
        return None
    leaves = flatten((args, kwargs))[0]
    return (id(getattr(fn, "__wrapped_transform__", fn)),
            tuple((type(x), np.shape(x), getattr(x, "dtype", None)) for x in leaves))


@contextlib.contextmanager
def _compile_lock(fn: Any, key: tuple | None) -> Iterator[None]:
    """Hold the machine's compile lock (a file lock in the disk cache) around the calls of
    `fn` of a signature (`_signature`) until one runs compiled code (a small program's first
    calls run on the interpreter, and the call after them compiles): the workers of one
    machine compile a program once, the others load it from the disk cache."""
    if key is None or key in _ready:
        yield
        return
    try:
        import fcntl
        lock = open(cache_root() / "dask-compile.lock", "a")
    except (ImportError, OSError):              # no file locks here: compile side by side
        yield
        return
    interpreted = fn.cache_info()["interpreted"]
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    if fn.cache_info()["interpreted"] == interpreted:
        _ready.add(key)


def _reraise(e: Exception, where: str) -> None:
    """Raise `e` again naming the chunk or batch it came from (tapejit errors keep their
    class, others get a note)."""
    if isinstance(e, TapejitError):
        raise type(e)(f"{where}: {e}") from None
    if hasattr(e, "add_note"):
        e.add_note(f"in {where}")
    raise e


# ---- data-parallel gradients ----------------------------------------------------------------
def _chunk(payload: _Payload, where: str, *data: Any) -> tuple[int, Any] | None:
    """One chunk's (rows, value and gradient), times its rows for a mean (None: an empty chunk
    of a mean, which adds nothing), computed in blocks of at most `block_rows` rows."""
    reduce, block_rows = payload.option
    rows = data[0].shape[0]
    if rows == 0 and reduce == "mean":
        return None
    total = None
    for start in range(0, max(rows, 1), block_rows):
        args, kwargs = payload.call_args([x[start:start + block_rows] for x in data])
        try:
            with _compile_lock(payload.fn, _signature(payload.fn, args, kwargs)):
                out = payload.fn(*args, **kwargs)
        except Exception as e:
            _reraise(e, where)
        if reduce == "mean":
            n = min(block_rows, rows - start)
            out = tree_map(lambda v: v * n, out)
        total = out if total is None else tree_map(np.add, total, out)
    return rows, total


def _add(*parts: tuple[int, Any] | None) -> tuple[int, Any] | None:
    parts = tuple(p for p in parts if p is not None)
    if not parts:
        return None
    rows, total = parts[0]
    for n, out in parts[1:]:
        rows, total = rows + n, tree_map(np.add, total, out)
    return rows, total


def _partial_sums(parts: list[Any]) -> list[Any]:
    """`parts` (Delayed) summed by a tree of addition tasks, FAN_IN at a time, down to at
    most FAN_IN partial sums: the client adds those (one hop less than a last task)."""
    add = dask.delayed(_add, pure=False)
    while len(parts) > FAN_IN:
        parts = [add(*parts[i:i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts


class DataParallel:
    """`tjd.value_and_grad(fn, ...)`: call it as `fn`'s value_and_grad, with dask arrays."""

    def __init__(self, fn: Callable[..., Any], reduce: str, argnums: int | Sequence[int],
                 has_aux: bool, backend: str | None, client: Any, timeout: float | None,
                 block_rows: int) -> None:
        if reduce not in REDUCE:
            raise ArgumentError(at_source(
                f"tjd.value_and_grad: reduce must be 'mean' (loss is a mean over rows) or "
                f"'sum' (a sum over rows), got {reduce!r}", user_source()))
        if not isinstance(block_rows, int) or block_rows < 1:
            raise ArgumentError(at_source(
                f"tjd.value_and_grad: block_rows must be a whole number >= 1, got "
                f"{block_rows!r}", user_source()))
        self.block_rows = block_rows
        self.transform = _value_and_grad(fn, argnums, has_aux, backend=backend)
        self.fn, self.reduce, self.argnums = fn, reduce, argnums
        self.client, self.timeout = client, timeout
        self._blocks: dict[str, list[Any]] = {}    # dask array name -> its row blocks
        self._fn_blob: bytes | None = None          # the transform, pickled once

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        client = _client(self.client, "tjd.value_and_grad")
        futures = client.compute(self.partials(*args, **kwargs), optimize_graph=False)
        distributed.wait(futures, timeout=self.timeout)
        result = _add(*client.gather(futures))
        if result is None:          # a mean over no rows: what one process computes
            args, kwargs = dask.compute(args, kwargs)
            return self.transform(*args, **kwargs)
        rows, out = result
        return tree_map(lambda v: v / rows, out) if self.reduce == "mean" else out

    def partials(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The step as at most FAN_IN Delayed partial sums, each `(rows, value and gradient
        summed over its chunks)` (None: empty chunks of a mean)."""
        leaves, treedef = flatten((args, kwargs))
        mapped = [k for k, leaf in enumerate(leaves) if isinstance(leaf, da.Array)]
        if not mapped:
            raise ArgumentError(at_source(
                f"tjd.value_and_grad({self.transform.label()}): no argument is a dask array; "
                f"pass the data as dask arrays chunked along axis 0 (da.from_array(x, "
                f"chunks=(rows, -1)))", user_source()))
        self._check_argnums(args)
        data = [leaves[k] for k in mapped]
        chunks = self._row_chunks(data)
        blocks = [self._row_blocks(x) for x in data]
        shared = [leaf for k, leaf in enumerate(leaves) if k not in mapped]
        if self._fn_blob is None:
            import cloudpickle
            self._fn_blob = cloudpickle.dumps(self.transform)
        payload = _Payload(self.transform, treedef, shared, mapped,
                           (self.reduce, self.block_rows), self._fn_blob)
        if sum(np.asarray(leaf).nbytes for leaf in shared) > EMBED_BYTES:
            payload = dask.delayed(payload, pure=False)    # one key, fetched by each worker
        chunk = dask.delayed(_chunk, pure=False)
        starts = np.concatenate([[0], np.cumsum(chunks)]).astype(int)
        parts = [chunk(payload, f"chunk {i} of {len(chunks)} (rows {starts[i]}:"
                                f"{starts[i + 1]})", *(b[i] for b in blocks))
                 for i in range(len(chunks))]
        return _partial_sums(parts)

    def _check_argnums(self, args: tuple) -> None:
        argnums = (self.argnums,) if isinstance(self.argnums, int) else self.argnums
        for i in argnums:
            if -len(args) <= i < len(args) and any(
                    isinstance(leaf, da.Array) for leaf in flatten(args[i])[0]):
                raise ArgumentError(at_source(
                    f"tjd.value_and_grad({self.transform.label()}): argument {i} (argnums) "
                    f"holds dask arrays; differentiate with respect to the parameters, which "
                    f"every chunk shares, and pass the data as the other arguments",
                    user_source()))

    def _row_chunks(self, data: list[Any]) -> tuple[int, ...]:
        first = data[0]
        for x in data:
            if x.ndim == 0:
                raise ArgumentError(at_source(
                    f"tjd.value_and_grad({self.transform.label()}): a 0-d dask array has no "
                    f"rows to split; pass it as a numpy array", user_source()))
            if any(np.isnan(c) for c in x.chunks[0]):
                raise ArgumentError(at_source(
                    f"tjd.value_and_grad({self.transform.label()}): a dask array of shape "
                    f"{x.shape} has unknown chunk sizes; call x.compute_chunk_sizes() first",
                    user_source()))
            if any(n > 1 for n in x.numblocks[1:]):
                raise ArgumentError(at_source(
                    f"tjd.value_and_grad({self.transform.label()}): a dask array of shape "
                    f"{x.shape} has chunks {x.chunks}; split it along axis 0 only: "
                    f"x.rechunk({{{', '.join(f'{a}: -1' for a in range(1, x.ndim))}}})",
                    user_source()))
            if x.chunks[0] != first.chunks[0]:
                raise ArgumentError(at_source(
                    f"tjd.value_and_grad({self.transform.label()}): the dask arrays' row "
                    f"chunks differ: {first.chunks[0]} (shape {first.shape}) and "
                    f"{x.chunks[0]} (shape {x.shape}); chunk them alike, e.g. "
                    f"y.rechunk({{0: x.chunks[0]}})", user_source()))
        return first.chunks[0]

    def _row_blocks(self, x: Any) -> list[Any]:
        """`x`'s row chunks as Delayed objects (kept per array: an array's graph is the same
        every step)."""
        blocks = self._blocks.get(x.name)
        if blocks is None:
            blocks = list(x.to_delayed().ravel())
            if len(self._blocks) > 16:
                self._blocks.clear()
            self._blocks[x.name] = blocks
        return blocks

    def worker_cache_info(self) -> dict[str, dict[str, Any]]:
        """Each worker's `cache_info()` of this step's transform: traces, compiles, disk
        loads, hits."""
        client = _client(self.client, "tjd.value_and_grad")
        import cloudpickle
        return client.run(_cache_info, cloudpickle.dumps(self.transform))


def _cache_info(blob: bytes) -> dict[str, Any]:
    import cloudpickle
    return cloudpickle.loads(blob).cache_info()


def value_and_grad(fn: Callable[..., Any], reduce: str = "mean", argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, backend: str | None = None, client: Any = None,
                   timeout: float | None = None, block_rows: int = BLOCK_ROWS) -> DataParallel:
    """`tj.value_and_grad(fn, argnums, has_aux)` over data split in row chunks on a Dask
    cluster: `step(params, X, Y)` with `X`, `Y` dask arrays chunked along axis 0 (alike, equal
    or unequal chunks; also inside pytrees) returns what `tj.value_and_grad(fn)(params,
    X.compute(), Y.compute())` returns, up to rounding.

    reduce: "mean" when `fn` is a mean over rows (chunk results weighted by their rows), "sum"
    when it is a sum. With has_aux, the aux pytree is reduced like the value. Arguments that
    are not dask arrays (the parameters) go to the cluster once per step; `argnums` must name
    those. client: a `distributed.Client` (default: the current one). timeout: seconds to wait
    for a step (default: no limit). block_rows: a chunk's task calls the program on at most
    this many rows at a time and adds the results (the intermediates of a block stay in
    cache, and a worker's memory holds a chunk plus one block's intermediates)."""
    return DataParallel(fn, reduce, argnums, has_aux, backend, client, timeout, block_rows)


# ---- ensembles ------------------------------------------------------------------------------
def _batch(payload: _Payload, where: str, *parts: Any) -> Any:
    """`fn` on one batch of members: called once (batched) or per member, results stacked."""
    args, kwargs = payload.call_args(parts)
    try:
        if payload.option:
            with _compile_lock(payload.fn, _signature(payload.fn, args, kwargs)):
                return payload.fn(*args, **kwargs)
        members = [payload.call_args([p[i] for p in parts]) for i in range(len(parts[0]))]
        key = _signature(payload.fn, *members[0])      # the members' arrays: rows alike
        outs = []
        for member_args, member_kwargs in members:
            with _compile_lock(payload.fn, key):
                outs.append(payload.fn(*member_args, **member_kwargs))
        leaves = [flatten(o)[0] for o in outs]
        return unflatten(flatten(outs[0])[1], [np.stack(ls) for ls in zip(*leaves)])
    except Exception as e:
        _reraise(e, where)


def map(fn: Callable[..., Any], *args: Any, batch: int | None = None,
        shared: Sequence[Any] = (), batched: bool = False, client: Any = None,
        timeout: float | None = None) -> Any:
    """`fn` on each member of an ensemble, on the cluster: member `i` is row `i` of every leaf
    of `args` (pytrees of arrays sharing their first axis), and `fn(*member, *shared)`'s
    results come back stacked along a new first axis, in order.

    Each task runs `batch` members (default: TASKS_PER_WORKER tasks for each of the cluster's
    workers: enough to balance them, few enough that Dask's cost per task stays small), calling
    `fn` once per member; with `batched=True` it calls `fn` once on the whole batch (a
    `tj.vmap`-ed function, or one written for batches), which must return results stacked along
    axis 0. Pass a tapejit transform (`tj.grad(f)`, `tj.jit(f)`): each worker traces it once
    and loads its program from the disk cache.
    `shared` arguments go to the cluster once. timeout: seconds to wait (default: no limit)."""
    if batch is not None and batch < 1:
        raise ArgumentError(at_source(f"tjd.map: batch must be >= 1, got {batch}",
                                      user_source()))
    arrays = [np.asarray(leaf) for leaf in flatten(args)[0]]
    sizes = {a.shape[0] if a.ndim else None for a in arrays}
    if not arrays or None in sizes or len(sizes) != 1:
        shapes = ", ".join(str(a.shape) for a in arrays) or "none"
        raise ArgumentError(at_source(
            f"tjd.map: every mapped argument must be an array with the members along axis 0, "
            f"all of one length; got shapes {shapes}", user_source()))
    (members,) = sizes
    if members == 0:
        raise ArgumentError(at_source("tjd.map: no members to map (axis 0 has length 0)",
                                      user_source()))
    client = _client(client, "tjd.map")
    if batch is None:
        workers = max(1, len(client.scheduler_info().get("workers", ())))
        batch = -(-members // (TASKS_PER_WORKER * workers))
    leaves, treedef = flatten(((*args, *shared), {}))
    import cloudpickle
    payload = _Payload(fn, treedef, leaves[len(arrays):], range(len(arrays)), batched,
                       cloudpickle.dumps(fn))
    if sum(np.asarray(leaf).nbytes for leaf in payload.shared) > EMBED_BYTES:
        # one key, fetched by each worker; small ones go inside each task: a key held by one
        # worker draws every task to that worker (4 tasks of 0.1 s ran on one of 2 workers)
        payload = dask.delayed(payload, pure=False)
    task = dask.delayed(_batch, pure=False)
    starts = range(0, members, batch)
    parts = [task(payload, f"batch {i} of {len(starts)} (members {s}:{min(s + batch, members)})",
                  *(a[s:s + batch] for a in arrays)) for i, s in enumerate(starts)]
    futures = client.compute(parts)
    distributed.wait(futures, timeout=timeout)
    results = client.gather(futures)
    stacked = [flatten(r)[0] for r in results]
    return unflatten(flatten(results[0])[1], [np.concatenate(ls) for ls in zip(*stacked)])
