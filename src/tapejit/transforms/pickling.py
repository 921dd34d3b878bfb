"""Pickling for Dask: a transform pickles (cloudpickle, as Dask ships functions) as its record,
function and options with a token; unpickled again in one process, it is the transform that
process already has, with its programs, so a worker that gets it task after task traces once
per signature (and loads the compiled program from its disk cache).
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

# what a transform has only in the process it runs in (`reduce` leaves them behind)
PER_PROCESS = frozenset(["_cache", "_fast", "_lock", "_info", "_last_miss", "_retraces",
                         "_warned", "_cleared", "_static_at", "_variants"])
# token -> the transform of this process pickled or unpickled under it; the last few unpickled
# are also kept alive, so a worker that gets a transform task after task keeps its programs
_by_token: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_unpickled: "OrderedDict[str, Any]" = OrderedDict()
KEEP_UNPICKLED = 32
_restore_lock = threading.Lock()


def reduce(transform: Any) -> tuple:
    """`transform.__reduce__`: its class, a token and what it has in every process."""
    token = transform.__dict__.get("_token")
    if token is None:
        import uuid                 # (1 ms of `import tapejit` otherwise)
        token = transform._token = uuid.uuid4().hex
        _by_token[token] = transform
    state = {k: v for k, v in transform.__dict__.items() if k not in PER_PROCESS}
    return restore, (type(transform), token, state)


def restore(cls: type, token: str, state: dict[str, Any]) -> Any:
    """The transform pickled under `token`: this process's, or a new one with empty caches."""
    with _restore_lock:
        transform = _by_token.get(token)
        if transform is None:
            transform = cls.__new__(cls)
            transform.__dict__.update(state)
            transform._fresh()
            _by_token[token] = transform
        _unpickled[token] = transform
        _unpickled.move_to_end(token)
        while len(_unpickled) > KEEP_UNPICKLED:
            _unpickled.popitem(last=False)
    return transform
