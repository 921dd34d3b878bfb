"""Random numbers with explicit keys (`tj.random`), as in jax.random.

A key is a uint32 array of shape (2,): `key(seed)` makes one, `split` and `fold_in` derive new
ones. It is an ordinary array argument, so a traced function that draws from the key it is
given serves every key with one compiled program: a training loop passes a new key each step
without recompiling. Every function works on concrete keys (numpy, eagerly) and on traced
ones, and draws the same bits either way, on every backend (floats made with log and cos,
`normal` and `categorical`'s, can differ in the last bit between math libraries).

The stream (ops/random.py): element i (row-major) of a draw of any shape is computed from the
Threefry-2x32 hash of the key and the counter (0, i): its words x0, x1 give 32 bits (x0 ^ x1)
or 64 bits (x0 * 2^32 + x1). This is JAX's generator (with `jax_threefry_partitionable`, its
default): `key`, `split`, `fold_in`, `bits` and `uniform` give jax.random's numbers bit for bit
(float64 as JAX does with x64 enabled). The other distributions are built on `uniform`:
- `normal`: Box-Muller, sqrt(-2 log(1 - u)) cos(2 pi v), u the uniforms of counters (0, i), v
  those of counters (1, i) (JAX uses the inverse CDF: its normals differ from these);
- `bernoulli`: uniform < p; `categorical`: the Gumbel-max trick, argmax(logits - log(-log u));
- `randint`: 64 random bits modulo the range (bias below range / 2^64);
- `permutation`: a stable argsort of 64 random bits.
Nothing is differentiated through a key (an integer array); `normal(key, s) * sigma + mu`
differentiates in mu and sigma as usual (the reparameterisation trick).
Float dtypes default to float64, as in numpy (JAX's default is float32).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import DtypeError, ShapeError, at_source, user_source
from .guards import size_error, traced_in
from .numpy_api import asarray, cast, normalize_axis
from .ops import random as R
from .trace import Tracer, bind_recorded

__all__ = ["key", "split", "fold_in", "bits", "uniform", "normal", "bernoulli", "categorical",
           "randint", "permutation"]

_U32, _U64 = np.dtype(np.uint32), np.dtype(np.uint64)
_FLOATS = {np.dtype(np.float32): (32, 9), np.dtype(np.float64): (64, 12)}  # bits, dropped
_WORD = 2 ** 32


def _error(cls: type, what: str, message: str) -> Exception:
    return cls(at_source(f"tj.random.{what}: {message}", user_source()))


def key(seed: Any) -> Any:
    """A key from an integer seed (taken modulo 2^64): the words (seed // 2^32, seed % 2^32),
    as `jax.random.PRNGKey(seed)` for seeds in [0, 2^32)."""
    if isinstance(seed, Tracer):
        if seed.dtype.kind not in "iu" or seed.shape != ():
            raise _error(DtypeError, "key", f"the seed must be an integer scalar, got {seed.aval}")
        seed = cast(seed, _U64 if seed.dtype == _U64 else np.dtype(np.int64))
        return np.stack([cast(np.floor_divide(seed, _WORD), _U32),
                         cast(np.remainder(seed, _WORD), _U32)])
    if isinstance(seed, (bool, np.bool_)) or np.asarray(seed).dtype.kind not in "iu" \
            or np.ndim(seed) != 0:
        raise _error(DtypeError, "key", f"the seed must be an integer, got {seed!r}")
    value = int(seed) % 2 ** 64
    return np.array([value >> 32, value & R.MASK], dtype=_U32)


def split(key: Any, num: int | tuple[int, ...] = 2) -> Any:
    """`num` new keys (an int, or a shape: keys of shape `num + (2,)`), independent of each
    other and of `key`: key i is the words of counter (0, i), so it is `fold_in(key, i)`."""
    words = _draw(key, _shape(num, "split"), 64, "split")
    return _as_keys(words)


def fold_in(key: Any, data: Any) -> Any:
    """A new key from `key` and an integer `data` (modulo 2^32), e.g. a step number: the words
    of counter (0, data); different data give independent keys."""
    if isinstance(data, Tracer):
        if data.dtype.kind not in "iu" or data.shape != ():
            raise _error(DtypeError, "fold_in", f"data must be an integer scalar, got {data.aval}")
        counter = cast(data, _U32)
    elif np.asarray(data).dtype.kind in "iu" and np.ndim(data) == 0:
        counter = np.uint32(int(data) % _WORD)
    else:
        raise _error(DtypeError, "fold_in", f"data must be an integer, got {data!r}")
    k0, k1 = _words(key, "fold_in")
    return _as_keys(R.threefry2x32(k0, k1, np.uint32(0), counter, bits=64))


def bits(key: Any, shape: Any = (), dtype: Any = np.uint32) -> Any:
    """Random bits of `shape`: uint32 (x0 ^ x1 of each element's block) or uint64."""
    dtype = np.dtype(dtype)
    if dtype not in (_U32, _U64):
        raise _error(DtypeError, "bits", f"dtype must be uint32 or uint64, got {dtype}")
    return _draw(key, _shape(shape, "bits"), 32 if dtype == _U32 else 64, "bits")


def uniform(key: Any, shape: Any = (), dtype: Any = np.float64, minval: Any = 0.0,
            maxval: Any = 1.0) -> Any:
    """Floats uniform on [minval, maxval): the top 23 (float32) or 52 (float64) random bits
    as a fraction, scaled."""
    dtype = _float(dtype, "uniform")
    u = _unit(key, _shape(shape, "uniform"), dtype, 0, "uniform")
    if _is(minval, 0) and _is(maxval, 1):
        return u
    lo, hi = cast(minval, dtype), cast(maxval, dtype)
    return np.maximum(lo, u * (hi - lo) + lo)


def normal(key: Any, shape: Any = (), dtype: Any = np.float64) -> Any:
    """Standard normal floats, by Box-Muller from two uniforms per element."""
    dtype, shape = _float(dtype, "normal"), _shape(shape, "normal")
    u, v = _unit(key, shape, dtype, 0, "normal"), _unit(key, shape, dtype, 1, "normal")
    return np.sqrt(-2 * np.log1p(-u)) * np.cos(2 * math.pi * v)


def bernoulli(key: Any, p: Any = 0.5, shape: Any = None) -> Any:
    """Booleans, True with probability p (broadcast to `shape`; default p's shape)."""
    p = asarray(p)
    dtype = p.dtype if p.dtype.kind == "f" else np.dtype(np.float64)
    shape = np.shape(p) if shape is None else _shape(shape, "bernoulli")
    return uniform(key, shape, dtype) < p


def categorical(key: Any, logits: Any, axis: int = -1, shape: Any = None) -> Any:
    """Category indices drawn with log-probabilities `logits` (unnormalised) along `axis`;
    `shape` (default: logits' shape without `axis`) may add leading axes of draws."""
    logits = asarray(logits)
    if logits.dtype.kind != "f":
        logits = cast(logits, np.dtype(np.float64))
    ax = normalize_axis(axis, logits.ndim, "tj.random.categorical")
    batch = logits.shape[:ax] + logits.shape[ax + 1:]
    shape = batch if shape is None else _shape(shape, "categorical")
    if len(shape) < len(batch) or np.broadcast_shapes(shape[len(shape) - len(batch):],
                                                      batch) != batch:
        raise _error(ShapeError, "categorical", f"shape {shape} does not end with the "
                     f"logits' batch shape {batch}")
    prefix = shape[:len(shape) - len(batch)]
    tiny = np.finfo(logits.dtype).tiny
    u = uniform(key, prefix + logits.shape, logits.dtype, minval=tiny, maxval=1.0)
    return np.argmax(logits - np.log(-np.log(u)), axis=len(prefix) + ax)


def randint(key: Any, shape: Any, minval: Any, maxval: Any, dtype: Any = np.int64) -> Any:
    """Integers uniform on [minval, maxval) (minval where maxval <= minval): 64 random bits
    modulo the range."""
    dtype, shape = np.dtype(dtype), _shape(shape, "randint")
    if dtype.kind not in "iu" or dtype == _U64:
        raise _error(DtypeError, "randint", f"dtype must be an integer type other than "
                     f"uint64, got {dtype}")
    if np.broadcast_shapes(shape, np.shape(minval), np.shape(maxval)) != shape:
        raise _error(ShapeError, "randint", f"minval {np.shape(minval)} and maxval "
                     f"{np.shape(maxval)} do not broadcast to shape {shape}")
    i64 = np.dtype(np.int64)
    lo, hi = cast(minval, i64), cast(maxval, i64)
    span = cast(np.maximum(hi - lo, 1), _U64)
    offset = np.remainder(_draw(key, shape, 64, "randint"), span)
    return cast(lo + cast(offset, i64), dtype)


def permutation(key: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
    """A random permutation of range(x) for an integer x; for an array, x shuffled along
    `axis` (each slice on its own with `independent`)."""
    traced = isinstance(key, Tracer)    # a concrete key's order is a constant of the trace
    if not isinstance(x, Tracer) and np.ndim(x) == 0:
        if np.asarray(x).dtype.kind not in "iu":
            raise _error(DtypeError, "permutation", f"x must be an integer or an array, got "
                         f"{x!r}")
        return np.argsort(_draw(key, (int(x),), 64, "permutation", record=traced),
                          kind="stable")
    x = asarray(x)
    ax = normalize_axis(axis, x.ndim, "tj.random.permutation")
    if independent:
        order = np.argsort(_draw(key, x.shape, 64, "permutation", record=traced), axis=ax,
                           kind="stable")
        return np.take_along_axis(x, order, axis=ax)
    order = np.argsort(_draw(key, (x.shape[ax],), 64, "permutation", record=traced),
                       kind="stable")
    return np.take(x, order, axis=ax)


# ---- the stream --------------------------------------------------------------------------------
def _words(key: Any, what: str) -> tuple[Any, Any]:
    """The two uint32 words of a key."""
    key = asarray(key)
    if key.dtype != _U32 or key.shape != (2,):
        raise _error(ShapeError if key.dtype == _U32 else DtypeError, what,
                     f"a key is a uint32 array of shape (2,), made by tj.random.key(seed), "
                     f"split or fold_in; got {key.dtype}{list(key.shape)}")
    return key[0], key[1]


def _draw(key: Any, shape: tuple[int, ...], width: int, what: str, high: int = 0,
          record: bool = True) -> Any:
    """The random bits (uint32 or uint64) of counters (high, i), i the elements' positions.
    While tracing they are recorded, the counter too (never a constant array), unless
    `record` is off and the key is concrete; outside tracing they are computed."""
    k0, k1 = _words(key, what)
    if math.prod(shape) > _WORD:
        raise _error(ShapeError, what, f"a draw has at most 2^32 elements, got shape {shape}")
    params = {"shape": shape, "dtype": "u32"}
    counter = (np.uint32(0) if shape == () else bind_recorded(R.iota, (), params) if record
               else R.iota(**params))
    return R.threefry2x32(k0, k1, np.uint32(high), counter, bits=width)


def _unit(key: Any, shape: tuple[int, ...], dtype: np.dtype, high: int, what: str) -> Any:
    """Floats uniform on [0, 1): the top mantissa bits of each element's random bits."""
    width, dropped = _FLOATS[dtype]
    fraction = np.floor_divide(_draw(key, shape, width, what, high),
                               (_U32 if width == 32 else _U64).type(2 ** dropped))
    return cast(fraction, dtype) * dtype.type(2.0 ** (dropped - width))


def _as_keys(words: Any) -> Any:
    """uint64 random bits as keys: each element's (high word, low word)."""
    return np.stack([cast(np.floor_divide(words, _U64.type(_WORD)), _U32),
                     cast(words, _U32)], axis=-1)


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer, Tracer)) else tuple(shape)
    traced = traced_in(shape)
    if traced is not None:
        raise size_error(f"tj.random.{what}", traced, user_source())
    if any(int(n) < 0 for n in shape):
        raise _error(ShapeError, what, f"negative size in shape {shape}")
    return tuple(int(n) for n in shape)


def _float(dtype: Any, what: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in _FLOATS:
        raise _error(DtypeError, what, f"dtype must be float32 or float64, got {dtype}")
    return dtype


def _is(value: Any, number: float) -> bool:
    """Whether `value` is the Python or numpy number `number` (not an array or tracer)."""
    return isinstance(value, (int, float, np.number)) and value == number
