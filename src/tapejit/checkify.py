"""`tj.checkify(f, errors)`: f's failed `tj.check`s (and NaNs, with nan_checks) as an error
value it returns, as JAX's `checkify`. A transform record over passes/checkify.py's Tape -> Tape
`checkify_tape`: caching, the fast path, explain, pickling and the first-call tier come with
the record (transforms/)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .transforms.arguments import CacheKey, CallArgs, split_args
from .errors import ArgumentError, UnsupportedOperationError, at_source, user_source
from .passes.checkify import ALL_CHECKS, USER_CHECKS, checkify_tape, error_sites, read_error
from .pytree import unflatten
from .transforms.cached import CachedTransform
from .transforms.outputs import unbox
from .transforms.record import Specialization, Traced, Transform


def _signature(t: CachedTransform, args: tuple, kwargs: dict) -> tuple[CallArgs, CacheKey]:
    call, static = split_args(t.fn, args, kwargs, t.static_argnums)
    return call, call.key(static, _how(t))


def _checked(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> Traced:
    """The checked tape; the error sites its code numbers, for the finisher."""
    return traced._replace(tape=checkify_tape(traced.tape, t.errors),
                               meta=error_sites(traced.tape, t.errors))


def _how(t: CachedTransform, *_: Any) -> tuple:
    return ("checkify", *sorted(t.errors))


def _finish(t: CachedTransform, program: Specialization, call: CallArgs,
            traced: bool) -> Callable[[Sequence[Any]], Any]:
    """`(Error, f's outputs)`."""
    if traced:
        raise UnsupportedOperationError(at_source(
            f"{t.label()} inside another transform: its error is read on the host; put "
            f"tj.checkify outside (tj.checkify(tj.jit(f)), tj.checkify(tj.grad(f)))",
            user_source()))
    n, sites, out_td = program.out.num_leaves, program.meta, program.out
    outs_of = unbox(program.tape, [False] * len(program.tape.outvars))
    return lambda outs: (read_error(sites, outs[n:]), unflatten(out_td, outs_of(outs)[:n]))


CHECKIFY = Transform("checkify", _signature, _finish, _checked, "checkify", how=_how)


def checkify(fn: Callable[..., Any], errors: frozenset = USER_CHECKS,
             static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """`err, out = checkify(fn, errors)(*args)`: `fn`'s outputs and a `tj.Error` for the first
    failed check (`tj.user_checks`), NaN-making op (`tj.nan_checks`) or either
    (`tj.all_checks`), in program order; `err.get()` is None when nothing failed."""
    if not isinstance(errors, (set, frozenset)) or not set(errors) <= ALL_CHECKS:
        raise ArgumentError(at_source(
            f"checkify: errors={errors!r}; give tj.user_checks, tj.nan_checks, tj.all_checks "
            f"or a union of them", user_source()))
    return CachedTransform(CHECKIFY, fn, static_argnums, backend, errors=frozenset(errors))
