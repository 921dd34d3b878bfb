"""The compiled sweeps of `GradientTape` (gradient_tape.py): a transform record whose call is
the recording's eqns cut from the sources to the targets, keyed by that cut tape (its text:
ops, names, shapes and dtypes), with one cache per backend for every tape of the process.
The program reads the recorded values it needs by name, then the output gradients.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from . import autodiff
from .transforms.arguments import CacheKey
from .derived_tapes import jacobian_tape, split_joint
from .ir import Tape, dce
from .transforms.builder import build
from .transforms.cached import CachedTransform
from .transforms.outputs import as_list
from .transforms.record import Specialization, Traced, Transform


@dataclasses.dataclass
class Recorded:
    """A sweep's call: the recorded values its program reads (by name), then the output
    gradients; `tape`: the recorded eqns cut from the sources to the targets."""

    leaves: list[Any]
    names: list[str]
    tape: Tape
    kind: str        # "gradient" or "jacobian"
    n_src: int


def _cut_tape(t: Any, call: Recorded, key: CacheKey) -> Traced:
    return Traced(call.tape)


def _sweep(t: Any, call: Recorded, key: CacheKey, traced: Traced) -> Traced:
    """The reverse sweep of the cut tape on the recorded values it reads (its Jacobian: one
    program from the sources and free values); where loops were re-rolled (their steps'
    values are no longer the recording's), the whole joint program from those values."""
    tape, n_src, n_targets = traced.tape, call.n_src, len(traced.tape.outvars)
    if call.kind == "jacobian":
        return Traced(jacobian_tape(tape, range(n_src), 1))
    joint = autodiff.vjp_tape(tape, range(n_src), [autodiff.INPUT] * n_targets)
    if tape is call.tape:
        return Traced(split_joint(joint, len(tape.invars), n_targets))
    return Traced(dce(Tape(joint.invars, joint.eqns, joint.outvars[n_targets:],
                           joint.constvars, joint.consts)))


def _no_signature(t: Any, args: tuple, kwargs: dict) -> tuple:
    raise AssertionError("a sweep is run by _run_sweep, with its call made")


# one cache serves every tape of the process, so many structures are expected (each costs a
# derivation; numba programs are shared across sizes): no re-trace warning
def _sweep_how(t: Any, call: Recorded, key: CacheKey, traced: Traced) -> tuple:
    return ("sweep", call.kind, call.n_src)


SWEEP = Transform("GradientTape", _no_signature, as_list, _sweep, "autodiff", _cut_tape,
                  _sweep_how,
                  fast_path=False, new_signature="a recorded structure not seen before",
                  warns=False)
_SWEEPS: dict[str | None, CachedTransform] = {}     # per backend
_INPUTS: dict[tuple, list[str]] = {}     # a sweep's key -> the recorded values it reads


def sweep_key(call: Recorded) -> CacheKey:
    return CacheKey((call.kind, call.tape, call.n_src), (), (), (), (), 0)


def sweep_cache(backend: str | None) -> CachedTransform:
    if backend not in _SWEEPS:
        _SWEEPS.setdefault(backend, CachedTransform(SWEEP, run_sweep, (), backend))
    return _SWEEPS[backend]


def run_sweep(backend: str | None, call: Recorded, values: Callable[[str], Any],
              extra: list[Any]) -> list[Any]:
    """The outputs of the sweep's program on the recorded values (by name), then `extra`:
    which values it reads is known once its program is built (the first time, in the cache's
    lookup, which counts it)."""
    sweeps, key = sweep_cache(backend), sweep_key(call)

    def read(names: list[str]) -> None:
        call.leaves = [values(name) for name in names] + extra
        call.names = names + ["ct"] * len(extra)

    def made() -> Specialization:
        program = build(sweeps, call, key)
        invars = program.tape.invars
        read(_INPUTS.setdefault(key, [v.name for v in invars[:len(invars) - len(extra)]]))
        return program

    if key in _INPUTS:
        read(_INPUTS[key])
    program, outs = sweeps.lookup(key, call, made)
    return program.run(call.leaves) if outs is None else outs


def tape_cache_info(backend: str | None = None) -> dict[str, Any]:
    """Counts of the reverse-sweep programs of GradientTape (traces: cut tapes derived;
    compiles; hits) for tapes made with `backend`."""
    return sweep_cache(backend).cache_info()
