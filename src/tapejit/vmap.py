"""`vmap(f)`: f mapped over an axis of its arguments, as one compiled program per signature.

Per signature (argument avals and the mapped axis of each leaf) `f` is traced once on the
avals of one example (mapped axes removed); `batching.batched_inline` then records that tape
on the whole batch, each mapped axis moved to the front by a transpose, one batched eqn per
eqn (ops without a batching rule run in a compiled loop over the batch, control flow's scan),
and the outputs are moved to `out_axes`. The result is optimized like any program: a
per-example gradient `vmap(grad(f))` is one native call. Called on tracers (inside grad, jit,
another vmap) the batched tape is inlined, so vmap composes with every transform in any order.

`in_axes`/`out_axes` follow JAX: an int (negative counts from the end), None (not mapped: an
argument shared by every example, an output that does not depend on a mapped argument), or a
pytree prefix of the arguments (a tuple with an entry per positional argument) / the output.
Keyword arguments are mapped over their axis 0. `axis_size` gives the batch size when no
argument is mapped.

In the layers: a record (transforms/record.py) whose tape transform is derived_tapes.py's
`mapped_tape`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from .transforms.arguments import CacheKey, CallArgs, split_args
from .derived_tapes import mapped_tape
from .errors import ArgumentError, ShapeError, at_source, user_source
from .transforms.traced import fn_source, trace_flat
from .pytree import TreeDef
from .transforms.cached import CachedTransform
from .transforms.outputs import as_output_tree
from .transforms.record import Traced, Transform

Axis = int | None


def _is_axis(spec: Any) -> bool:
    return spec is None or (isinstance(spec, (int, np.integer)) and not isinstance(spec, bool))


def _prefix(spec: Any, td: TreeDef, what: str) -> list[Axis]:
    """The axis of each leaf of a tree of structure `td`, from `spec`, a pytree prefix of it
    (an int or None stands for every leaf below it)."""
    if _is_axis(spec):
        return [None if spec is None else int(spec)] * td.num_leaves
    if isinstance(spec, dict) and td.kind == "dict" and set(spec) == set(td.meta):
        return [a for key, child in zip(td.meta, td.children)
                for a in _prefix(spec[key], child, what)]
    if isinstance(spec, (tuple, list)) and td.kind in ("tuple", "list", "namedtuple") \
            and len(spec) == len(td.children):
        return [a for s, child in zip(spec, td.children) for a in _prefix(s, child, what)]
    shown = spec if isinstance(spec, (dict, tuple, list)) else f"{type(spec).__name__} {spec!r}"
    raise ArgumentError(at_source(
        f"vmap: {what} {shown} is not a pytree prefix of the value's structure {td}: give an "
        f"int or None for the whole value, or a container of the value's own structure (a "
        f"tuple/list of its length, a dict of its keys) holding ints and Nones",
        user_source()))


def _in_axes(in_axes: Any, call: CallArgs, n_given: int) -> list[Axis]:
    """The mapped axis of each leaf of the call (None: shared), not yet normalized."""
    if isinstance(in_axes, (tuple, list)):
        if len(in_axes) != n_given:
            raise ArgumentError(at_source(
                f"vmap: in_axes has {len(in_axes)} entries but the function was called with "
                f"{n_given} positional argument(s): give one entry per positional argument "
                f"(an int, None or a pytree prefix of the argument), or one int/None for all",
                user_source()))
    elif not _is_axis(in_axes):
        raise ArgumentError(at_source(
            f"vmap: in_axes must be an int, None, or a tuple/list with an entry per positional "
            f"argument, got {type(in_axes).__name__} {in_axes!r}", user_source()))
    axes: list[Axis] = []
    for pos, td in zip(call.dynamic, call.treedefs):
        if pos >= n_given:          # keyword arguments: mapped over axis 0, as JAX
            spec: Any = 0
        else:
            spec = in_axes[pos] if isinstance(in_axes, (tuple, list)) else in_axes
        axes += _prefix(spec, td, f"in_axes entry for argument {pos}")
    return axes


def _normalized(axes: Sequence[Axis], call: CallArgs) -> tuple[Axis, ...]:
    out = []
    for axis, aval, name in zip(axes, call.avals, call.names):
        if axis is not None:
            if not -aval.ndim <= axis < aval.ndim:
                raise ShapeError(at_source(
                    f"vmap: in_axes {axis} is out of range for argument {name} ({aval}, rank "
                    f"{aval.ndim}): mapping along axis {axis} needs rank at least "
                    f"{axis + 1 if axis >= 0 else -axis}. Pass None for arguments that are "
                    f"shared by every example", user_source()))
            axis %= aval.ndim
        out.append(axis)
    return tuple(out)


def _batch_size(axes: Sequence[Axis], call: CallArgs, axis_size: int | None) -> int:
    sizes = {name: (aval.shape[a], a, aval) for a, aval, name in
             zip(axes, call.avals, call.names) if a is not None}
    found = {n for n, _, _ in sizes.values()} | ({axis_size} if axis_size is not None else set())
    if len(found) > 1:
        listed = "; ".join(f"{name} ({aval}) has {n} along axis {a}"
                           for name, (n, a, aval) in sizes.items())
        given = f"; axis_size={axis_size}" if axis_size is not None else ""
        raise ShapeError(at_source(
            f"vmap: the mapped axes have different sizes: {listed}{given}. Every mapped "
            f"argument needs the same length along its mapped axis", user_source()))
    if not found:
        raise ArgumentError(at_source(
            "vmap: no argument is mapped (in_axes is None for all of them, or there are no "
            "arguments): give axis_size= for the batch size", user_source()))
    return found.pop()


def _vmap_signature(t: CachedTransform, args: tuple, kwargs: dict) -> tuple[CallArgs, CacheKey]:
    """The call, keyed by the mapped axis of each leaf and the batch size too."""
    call, static = split_args(t.fn, args, kwargs, ())
    axes = _normalized(_in_axes(t.in_axes, call, len(args)), call)
    return call, call.key(static, (axes, _batch_size(axes, call, t.axis_size)))


def _trace_example(t: CachedTransform, call: CallArgs, key: CacheKey) -> Traced:
    """`t.fn` traced on one example: the mapped axes removed."""
    axes, _ = key.options
    example = [a if ax is None else a.update(a.shape[:ax] + a.shape[ax + 1:])
               for a, ax in zip(call.avals, axes)]
    tape, out_td, _ = trace_flat(t.fn, dataclasses.replace(call, avals=example))
    return Traced(tape, out_td)


def _batched(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> Traced:
    axes, size = key.options
    out_axes = _prefix(t.out_axes, traced.out, "out_axes")
    return traced._replace(tape=mapped_tape(
        traced.tape, axes, call.avals, call.names, size, out_axes, fn_source(t.fn)))


def _vmap_how(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> tuple:
    return ("vmap", key.options, tuple(call.avals), tuple(call.names),
            tuple(_prefix(t.out_axes, traced.out, "out_axes")))


VMAP = Transform("vmap", _vmap_signature, as_output_tree, _batched, "batched", _trace_example,
                 _vmap_how)


def vmap(fn: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0,
         axis_size: int | None = None, backend: str | None = None) -> Callable[..., Any]:
    """`fn` mapped over an axis of its arguments (JAX's `vmap`): `in_axes` says which axis of
    each argument is mapped (an int, None for an argument shared by every example, or a
    pytree prefix of the arguments: a tuple with one entry per positional argument), `out_axes`
    where the batch axis goes in each output (None for outputs that do not depend on a mapped
    argument); `axis_size` is the batch size when no argument is mapped. Every call of a new
    signature traces `fn` once, for one example, and compiles one program for the whole batch;
    inside other transforms it is inlined (`vmap(grad(f))`: per-example gradients)."""
    if axis_size is not None and (not _is_axis(axis_size) or axis_size < 0):
        raise ArgumentError(at_source(f"vmap: axis_size must be a non-negative int, got "
                                      f"{axis_size!r}", user_source()))
    return CachedTransform(VMAP, fn, (), backend, in_axes=in_axes, out_axes=out_axes,
                           axis_size=axis_size)
