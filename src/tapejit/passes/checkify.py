"""checkify: a program's failed `tj.check`s and NaNs as an error value it returns (JAX's
`jax.experimental.checkify`), as a Tape -> Tape function.

    checked = checkify_tape(tape, errors)     # the transform: Tape -> Tape
    sites = error_sites(tape, errors)         # the host's table of what each code means
    outs = run(checked, args)                 # interpreted or compiled, as any tape
    err = read_error(sites, outs[len(tape.outvars):])
    err.get()                                 # None, or the first failure's message

`errors` is a set of categories: `USER_CHECKS` (each `check` eqn: `pred` had a false
element) and `NAN_CHECKS` (each eqn with a floating-point output that holds a NaN, JAX's
nan_checks: the first op that made a NaN is reported, since the first failing site wins and
the ops after it only pass the NaN on). Index checks need no category: tapejit bounds-checks
every traced index and raises IndexOutOfBoundsError on every backend.

The checked tape has `tape`'s inputs and outputs, then
- `code`: an int32 scalar, 0 when no site failed, else the number (from 1) of the first site,
  in the order of the tape's eqns, that failed (`error_sites` lists them in that order);
- the format arguments of every check site, in order (what the failed one's message shows).
Each check eqn becomes `np.all(pred)` and the code a chain of scalar selects (no check eqn is
left: the program compiles on every backend). A control-flow op whose bodies hold checks runs
by its op's `checkify` rule (control/checkified.py: a scan of static length; a re-rolled
Python loop is one), its sites those of its bodies, numbered in place; other ops holding
checks are refused. Run it on a traced tape, before the passes.

`tj.checkify(f, errors)` is a transform record over these: its tape transform is
`checkify_tape(tape, errors)`, and it finishes a call's outputs into `(Error, f's outputs)`
with `read_error(error_sites(tape, errors), outs[len(tape.outvars):])`, `tape` being the
program it was given. In the layers: a pass (it records with numpy on tracers).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from ..errors import CheckError, UnsupportedOperationError, at_source
from ..interpret import evaluate
from ..ir import Eqn, Src, Tape, has_effect, sub_tapes
from ..numpy_api.checks import failed_message
from ..ops import OPS
from ..ops import effects
from ..trace import bind_recorded, new_trace, recording_source, var_of

USER_CHECKS = frozenset({"user"})
NAN_CHECKS = frozenset({"nan"})
ALL_CHECKS = USER_CHECKS | NAN_CHECKS
_I32 = np.dtype(np.int32)


class Site(NamedTuple):
    """A place a checked program can fail: a check (`message` a format string of `names`,
    whose values it returns) or an op whose float output may hold a NaN (`message` the op)."""
    kind: str
    message: str
    names: tuple[str, ...]
    src: Src | None


@dataclasses.dataclass(frozen=True)
class Error:
    """What `tj.checkify(f)(x)` returns beside f's output: the first failure, if any."""
    message: str | None = None

    def get(self) -> str | None:
        """The first failure's message and line, or None when nothing failed."""
        return self.message

    def get_exception(self) -> CheckError | None:
        return None if self.message is None else CheckError(self.message)

    def throw(self) -> None:
        """Raise CheckError (a ValueError) when a check failed or a NaN was made."""
        if self.message is not None:
            raise CheckError(self.message)

    def __repr__(self) -> str:
        return f"Error({self.message!r})" if self.message else "Error(no error)"


def _sites(tape: Tape, errors: frozenset) -> Iterator[tuple[int, tuple[Site, ...]]]:
    """(eqn index, its sites) of each eqn of `tape` that can fail, in order: a check, an op
    with a float output (nan checks), a control-flow op whose bodies hold checks (theirs)."""
    unknown = set(errors) - ALL_CHECKS
    if unknown:
        raise UnsupportedOperationError(
            f"checkify knows the error sets tj.user_checks and tj.nan_checks (and their union "
            f"tj.all_checks), not {sorted(unknown)}")
    for k, eqn in enumerate(tape.eqns):
        if eqn.op == effects.check.name:
            if "user" in errors:
                yield k, (Site("check", eqn.kw["msg"], eqn.kw["names"], eqn.src),)
        elif any(has_effect(e) for _, body in sub_tapes(eqn) for e in body.eqns):
            if OPS[eqn.op].checkify is None:
                raise UnsupportedOperationError(at_source(
                    f"tj.check inside a {eqn.op} body: checkify does not reach into it yet. "
                    f"Check the values before or after the {eqn.op}", eqn.src))
            yield k, tuple(site for _, body in sub_tapes(eqn)
                           for site in error_sites(body, errors))
        elif "nan" in errors and any(o.aval.is_float for o in eqn.outs):
            yield k, (Site("nan", eqn.op, (), eqn.src),)


def error_sites(tape: Tape, errors: frozenset = USER_CHECKS) -> tuple[Site, ...]:
    """The error sites of `tape`, numbered from 1 in this order by `checkify_tape`'s code."""
    return tuple(site for _, sites in _sites(tape, errors) for site in sites)


def checkify_tape(tape: Tape, errors: frozenset = USER_CHECKS) -> Tape:
    """`tape` with the error code and the checks' format arguments as extra outputs (the
    module docstring), and no check eqn left."""
    offsets, total = {}, 0
    for k, sites in _sites(tape, errors):
        offsets[k], total = total, total + len(sites)
    failures: list[tuple[Any, int]] = []    # (ok: bool, or code: int32; its first number - 1)
    payload: list[Any] = []
    seen: list[Eqn] = []

    def apply(eqn: Eqn, ins: list[Any]) -> Any:
        offset, op = offsets.get(len(seen)), OPS[eqn.op]
        seen.append(eqn)
        with recording_source(eqn.src):
            if eqn.op == effects.check.name:
                ok = np.all(ins[0])
                if offset is not None:
                    failures.append((ok, offset))
                    payload.extend(ins[1:])
                return ok
            if op.checkify is not None and has_effect(eqn):
                outs, code, values = op.checkify(eqn, ins, lambda t: checkify_tape(t, errors))
                failures.append((code, offset))
                payload.extend(values)
                return outs
            out = bind_recorded(op, ins, eqn.kw)
            if offset is not None:
                outs = out if op.multiple_results else (out,)
                nans = [np.any(np.isnan(o)) for o, v in zip(outs, eqn.outs) if v.aval.is_float]
                failures.append((np.logical_not(np.any(np.stack(nans)) if len(nans) > 1
                                                else nans[0]), offset))
            return out

    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        outs = evaluate(tape, inputs, apply)
        return trace.to_tape([var_of(t) for t in inputs], [*outs, _first(failures), *payload])


def _first(failures: list[tuple[Any, int]]) -> Any:
    """The error code: the number of the first failed site, 0 if none failed."""
    code: Any = np.zeros((), _I32)
    for failed, offset in reversed(failures):
        if np.dtype(failed.dtype) == np.bool_:
            code = np.where(failed, code, np.asarray(offset + 1, _I32))
        else:
            code = np.where(failed != 0, failed + np.asarray(offset, _I32), code)
    return code


def read_error(sites: Sequence[Site], extra: Sequence[Any]) -> Error:
    """The `Error` a checked program's extra outputs (`code`, then the checks' format
    arguments) say."""
    number = int(extra[0])
    if number == 0:
        return Error()
    site, offset = sites[number - 1], 1
    for earlier in sites[:number - 1]:
        offset += len(earlier.names)
    if site.kind == "nan":
        where = "" if site.src is None else f" at {site.src[0]}:{site.src[1]}"
        return Error(f"nan generated by primitive {site.message}{where}")
    values = [np.asarray(v) for v in extra[offset:offset + len(site.names)]]
    return Error(failed_message(effects.format_message(site.message, site.names, values),
                                site.src))
