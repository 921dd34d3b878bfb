"""A call's arguments as the transforms see them: the leaves of the traced arguments, their
avals and names, and the call's signature (the key of the per-signature cache).

`split_args(fn, args, kwargs, static_argnums)` binds keyword arguments, separates the static
arguments (their values are part of the key), flattens the others into leaves and gives each
leaf an aval (Python scalars are weakly typed) and a name from `fn`'s parameters (the tape's
input names). Arguments that are neither arrays, numbers nor pytrees of them are refused here,
at the user's line, and so are ndarray subclasses.

In the layers: above tracing (it reads tracers' avals) and the CUDA run-time side (device
arrays' avals); the bottom of the transforms package: below traced.py (which traces a
function on a `CallArgs`), the builder and the per-signature cache.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..avals import Aval, aval_of
from ..cuda_support import device_aval, is_device_array
from ..errors import ArgumentError, DtypeError, IntegerOverflowError, at_source, user_source
from ..pytree import TreeDef, flatten, leaf_paths, unflatten
from ..recording import Constant
from ..trace import Tracer

_SCALAR_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64)}
_INT64 = np.iinfo(np.int64)


class CacheKey(NamedTuple):
    """A call's signature, the key of a transform's per-signature cache."""

    options: tuple       # what the transform's options make of the call (argnums, mapped axes)
    treedefs: tuple      # the pytree structure of each traced argument
    avals: tuple         # each leaf's shape and dtype
    weak: tuple          # each leaf is a Python scalar (weakly typed)
    static: tuple        # (position, type, value) of each static argument
    n_pos: int           # how many arguments were positional
    device: tuple = ()   # the CUDA device the program runs on

    def sizeless(self) -> CacheKey:
        """The key with each leaf's shape as its rank: signatures whose programs differ only
        in sizes (which compiled code takes at run time) share it."""
        return self._replace(avals=tuple((len(a.shape), a.dtype) for a in self.avals))


def _leaf_aval(leaf: Any, where: str) -> tuple[Aval, bool]:
    """The aval of an argument leaf and whether it is weakly typed (a Python scalar)."""
    if isinstance(leaf, Tracer):
        return leaf.aval, leaf.weak
    if type(leaf) in _SCALAR_DTYPES:
        if type(leaf) is int and not _INT64.min <= leaf <= _INT64.max:
            raise IntegerOverflowError(at_source(
                f"{where} is the Python int {leaf}, beyond int64, the dtype Python ints compute "
                f"in (numpy has no integer array for it either: np.asarray gives dtype object). "
                f"Pass it as a float (float(n)), as np.uint64 if it is in [0, 2**64), or mark "
                f"the argument static (static_argnums) to keep it a Python int.", user_source()))
        return Aval((), _SCALAR_DTYPES[type(leaf)]), True
    if isinstance(leaf, (np.ndarray, np.generic)) or is_device_array(leaf):
        refuse_subclass(leaf, where)
        try:
            if is_device_array(leaf):   # the CUDA backend's
                return device_aval(leaf), False
            return aval_of(leaf), False
        except TypeError as err:
            raise DtypeError(at_source(f"{where}: {err}", user_source())) from None
    raise ArgumentError(at_source(
        f"{where} is a {type(leaf).__name__}, not an array or a number. Pass arrays, numbers "
        f"or pytrees of them (dict/list/tuple/namedtuple/dataclass), or mark the argument "
        f"static with static_argnums (static_argnames for one passed by name).", user_source()))


def refuse_subclass(leaf: Any, where: str) -> None:
    """Raise for an ndarray subclass whose meaning a plain array would lose (a masked array's
    mask, np.matrix's `*`, a unit): tapejit computes with plain ndarrays. np.memmap is one,
    and so is tapejit's own Constant (an array a numpy constructor made while tracing)."""
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray and \
            not isinstance(leaf, (np.memmap, Constant)):
        raise ArgumentError(at_source(
            f"{where} is a {type(leaf).__module__}.{type(leaf).__name__} of shape "
            f"{leaf.shape}, an ndarray subclass: tapejit computes with plain arrays, so what "
            f"the subclass adds would be lost silently (a masked array's mask, np.matrix's `*` "
            f"as a matrix product). Pass a plain array: x.filled(fill) or x.compressed() for a "
            f"masked array, np.asarray(x) for a matrix (and `@` for its products), or "
            f"np.asarray(x) in general.", user_source()))


def _identifier(path: str) -> str:
    name = re.sub(r"\W", "_", path)
    return name if name[:1].isalpha() or name[:1] == "_" else f"a_{name}"


@dataclasses.dataclass
class CallArgs:
    """A call's arguments split into the leaves of the traced ones and the static rest. When the
    call passes keyword arguments that cannot go positionally, their dict is one more (traced)
    argument after the `n_pos` positional ones."""

    args: tuple                 # all positional arguments as given (then the keyword dict)
    n_pos: int                  # how many of `args` are positional
    dynamic: tuple[int, ...]    # positions of the traced arguments
    leaves: list[Any]
    treedefs: list[TreeDef]     # one per traced argument
    avals: list[Aval]
    weak: list[bool]
    names: list[str]
    held: dict = dataclasses.field(default_factory=dict)   # static arguments passed by name

    def key(self, static: tuple, options: tuple = ()) -> CacheKey:
        """The call's signature, with what a transform's options make of it."""
        return CacheKey(options, tuple(self.treedefs), tuple(self.avals), tuple(self.weak),
                        static, self.n_pos)

    def leaf_range(self, position: int) -> range:
        i = self.dynamic.index(position)
        start = sum(td.num_leaves for td in self.treedefs[:i])
        return range(start, start + self.treedefs[i].num_leaves)

    def rebuild(self, leaves: Sequence[Any]) -> list[Any]:
        full, it = list(self.args), iter(leaves)
        for pos, td in zip(self.dynamic, self.treedefs):
            full[pos] = unflatten(td, [next(it) for _ in range(td.num_leaves)])
        return full

    def call(self, fn: Callable[..., Any], leaves: Sequence[Any]) -> Any:
        """`fn` applied to the arguments with these leaves in place of the traced ones."""
        full = self.rebuild(leaves)
        return fn(*full[:self.n_pos], **(full[self.n_pos] if len(full) > self.n_pos else {}),
                  **self.held)


def _parameter_names(fn: Callable[..., Any], count: int) -> list[str]:
    """The names of `fn`'s first `count` positional parameters (kept per function: inspect's
    signature cost 10 us a call)."""
    try:
        return list(_NAMES[fn][count])
    except (KeyError, TypeError):
        pass
    names = _names(fn, count)
    try:
        _NAMES.setdefault(fn, {})[count] = tuple(names)
    except TypeError:               # not weakly referenceable
        pass
    return names


_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(count):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "arg")
            names.append(f"{star}{i}")
    return names


def fn_name(fn: Callable[..., Any]) -> str:
    """`fn`'s name, for messages."""
    return getattr(fn, "__name__", type(fn).__name__)


def _bind(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Positional arguments and the keyword arguments that cannot be passed positionally."""
    if not kwargs:
        return args, {}
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise ArgumentError(at_source(f"{fn_name(fn)}: {err}", user_source())) from None
    return bound.args, bound.kwargs


def _positional(fn: Callable[..., Any]) -> tuple[list[str], str | None, dict[str, str]]:
    """The names of `fn`'s parameters that may be passed by position, the name of its `*args`
    (None: it has none; "" where `fn` has no signature), and every parameter's kind."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [], "", {}
    return ([p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)],
            next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None),
            {p.name: p.kind.description for p in params})


def static_argnums_of(fn: Callable[..., Any], static_argnums: int | Sequence[int],
                      static_argnames: str | Sequence[str]) -> tuple[int | str, ...]:
    """`static_argnums` with the positions of the parameters `static_argnames` names, then the
    names of the keyword-only ones (JAX's: a static argument may be passed by position or by
    name, `f(x, mode="fast")`, and `def f(x, *, training)` is static by name), checked against
    `fn`'s signature."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if not nums and not names:
        return ()
    positional, varargs, kinds = _positional(fn)
    for i in nums:
        if varargs is None and not -len(positional) <= i < len(positional):
            raise ArgumentError(at_source(
                f"static_argnums {i} is out of range: {fn_name(fn)} takes {len(positional)} "
                f"positional argument(s)", user_source()))
    for name in names:
        if name not in positional and kinds.get(name) != "keyword-only":
            what = (f"is {fn_name(fn)}'s {kinds[name]} parameter" if name in kinds else
                    f"is no parameter of {fn_name(fn)}")
            raise ArgumentError(at_source(
                f"static_argnames {name!r} {what}: static arguments are named parameters, not "
                f"*args or **kwargs (name the parameter, or pass the value as a traced "
                f"argument)", user_source()))
    return tuple(dict.fromkeys(nums + tuple(positional.index(n) for n in names
                                            if n in positional)
                               + tuple(n for n in names if n not in positional)))


def _static_positions(args: tuple, static_argnums: tuple[int | str, ...]
                      ) -> tuple[set[int], tuple]:
    """The positions of the static arguments given (one not given takes its default), and
    their part of the cache key."""
    positions = {i % len(args) for i in static_argnums
                 if isinstance(i, int) and -len(args) <= i < len(args)}
    return positions, tuple((i, type(args[i]), _hashable(args[i], f"static argument {i}"))
                            for i in sorted(positions))


def _hashable(value: Any, what: str) -> Any:
    try:
        hash(value)
    except TypeError:
        raise ArgumentError(at_source(
            f"{what} is an unhashable {type(value).__name__}: static arguments are part of "
            f"the cache key, so they must be hashable (use a tuple instead of a list), or pass "
            f"arrays as traced arguments", user_source())) from None
    return value


def split_args(fn: Callable[..., Any], args: tuple, kwargs: dict,
               static_argnums: tuple[int | str, ...]) -> tuple[CallArgs, tuple]:
    """Flatten the traced arguments; return them and the static arguments' key. A static
    parameter passed by name where it cannot go by position (a keyword-only one, or an earlier
    one left to its default) is held by name."""
    args, extra = _bind(fn, args, kwargs)
    static_pos, static = _static_positions(args, static_argnums)
    held = {}
    if extra and static_argnums:
        positional = _positional(fn)[0]
        named = (i if isinstance(i, str) else positional[i] for i in static_argnums
                 if isinstance(i, str) or 0 <= i < len(positional))
        held = {name: extra.pop(name) for name in named if name in extra}
        static += tuple((name, type(v), _hashable(v, f"static argument {name}"))
                        for name, v in sorted(held.items()))
    n_pos = len(args)
    dynamic = tuple(i for i in range(n_pos) if i not in static_pos) + ((n_pos,) if extra else ())
    names = _parameter_names(fn, n_pos) + [""]
    full = tuple(args) + ((extra,) if extra else ())
    leaves, treedefs, avals, weak, leaf_names = [], [], [], [], []
    for pos in dynamic:
        arg_leaves, td = flatten(full[pos])
        for leaf, path in zip(arg_leaves, leaf_paths(full[pos], names[pos])):
            path = path[1:] if pos == n_pos else path  # a keyword's path is "_<name>"
            aval, is_weak = _leaf_aval(leaf, f"argument {path}")
            avals.append(aval)
            weak.append(is_weak)
            leaf_names.append(_identifier(path))
        leaves += arg_leaves
        treedefs.append(td)
    call = CallArgs(full, n_pos, dynamic, leaves, treedefs, avals, weak, leaf_names, held)
    return call, static


def check_argnums(argnums: Any, transform: str) -> Any:
    """`argnums` as given, once checked to be an int or a non-empty sequence of ints (at the
    line creating the transform, not at its first call)."""
    nums = [argnums] if isinstance(argnums, (int, np.integer)) else argnums
    if not isinstance(nums, (list, tuple)) or not nums or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in nums):
        raise ArgumentError(at_source(
            f"tj.{transform}: argnums={argnums!r}; it must be an int or a non-empty tuple of "
            f"ints (positions of the arguments to differentiate), e.g. argnums=0 or "
            f"argnums=(0, 1)", user_source()))
    return argnums


def normalize_argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
    for i in nums:
        if not isinstance(i, (int, np.integer)) or not -nargs <= i < nargs:
            raise ArgumentError(at_source(
                f"argnums {i!r} is out of range: the function was called with {nargs} "
                f"positional argument(s)", user_source()))
    return tuple(int(i) % nargs for i in nums)


def argnums_signature(transform: Any, args: tuple, kwargs: dict) -> tuple[CallArgs, CacheKey]:
    """The call and the cache key of a call of a transform that differentiates with respect
    to `transform.argnums` (the key's options: the normalized argnums)."""
    call, static = split_args(transform.fn, args, kwargs, transform.static_argnums)
    argnums = normalize_argnums(transform.argnums, call.n_pos)
    if any(i not in call.dynamic for i in argnums):
        raise ArgumentError(at_source(f"argnums {transform.argnums} and static_argnums "
                                      f"{transform.static_argnums} overlap", user_source()))
    return call, call.key(static, argnums)


def refuse_aliasing(leaves: Sequence[Any], assigned: Sequence[int], names: Sequence[str],
                    label: str) -> None:
    """Raise when an argument leaf the function assigns into shares memory with another (the
    same array passed twice, or a view of it): numpy would show the write through the other,
    but the array passed in is never written, so the results would differ silently."""
    for i in assigned:
        for j, other in enumerate(leaves):
            if j != i and _shares_memory(leaves[i], other):
                raise ArgumentError(at_source(
                    f"{label}: the function assigns into argument {names[i]} (x[...] = v, "
                    f"x += v, x.fill(v)), and argument {names[j]} is the same array or shares "
                    f"its memory. In numpy {names[j]} would see the write; tapejit records the "
                    f"assignment as a new value and never writes into the arrays passed in, so "
                    f"the results would differ. Pass a copy (f(a, a.copy())), or copy inside "
                    f"the function before assigning (x = x.copy()).", user_source()))


def _shares_memory(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b) and np.shares_memory(a, b)
    return a is b and isinstance(a, Tracer)


def check_float_inputs(what: str, call: CallArgs, wrt: Sequence[int]) -> None:
    for j in wrt:
        if call.avals[j].dtype.kind != "f":
            raise DtypeError(at_source(
                f"{what}: argument {call.names[j]} has dtype {call.avals[j].dtype}; tapejit "
                f"differentiates only floating-point inputs. Pass floats (e.g. np.float64(x) "
                f"or x.astype(float)), or leave it out of argnums (for tj.vjp, close over it "
                f"with functools.partial).", user_source()))


# the fix where calls trace again often for a new signature (cached.py's warning)
SIGNATURE_FIX = ("Every new pytree structure, leaf shape or dtype, or static argument value "
                 "traces again: pass changing numbers as arguments rather than static_argnums, "
                 "and keep shapes to a few sizes (pad batches).")


def miss_reason(old: CacheKey, old_names: Sequence[str], new: CacheKey,
                new_names: Sequence[str]) -> str:
    """Why `new` missed: what differs from `old`, naming the leaves whose shape or dtype
    changed."""
    reasons = []
    if old.device != new.device:
        reasons.append(f"device changed: {old.device} -> {new.device}")
    if old.options != new.options:
        reasons.append(f"argnums changed: {old.options} -> {new.options}")
    if old.n_pos != new.n_pos:
        reasons.append(f"positional count changed: {old.n_pos} -> {new.n_pos}")
    if old.treedefs != new.treedefs:
        shown = lambda tds: ", ".join(map(str, tds))  # noqa: E731
        reasons.append(f"structure changed: ({shown(old.treedefs)}) -> ({shown(new.treedefs)})")
    elif old.avals != new.avals or old.weak != new.weak:
        def typed(aval: Any, weak: bool) -> str:
            return f"{aval}{' (Python scalar)' if weak else ''}"
        leaves = [f"{name}: {typed(a, w)} -> {typed(b, v)}" for name, a, w, b, v
                  in zip(new_names, old.avals, old.weak, new.avals, new.weak)
                  if (a, w) != (b, v)]
        what = "shapes/dtypes" if old.avals != new.avals else "weak types"
        reasons.append(f"{what} changed: {', '.join(leaves[:4])}"
                       + (f" (and {len(leaves) - 4} more)" if len(leaves) > 4 else ""))
    if old.static != new.static:
        old_values = {i: (t, v) for i, t, v in old.static}
        changed = [f"argument {i}: {old_values[i][1]!r:.40} -> {v!r:.40}"
                   for i, t, v in new.static if old_values.get(i, (t, v)) != (t, v)]
        reasons.append("static arguments changed: " + (
            ", ".join(changed) or f"{old.static!r:.60} -> {new.static!r:.60}"))
    return "; ".join(reasons) or "signature changed"
