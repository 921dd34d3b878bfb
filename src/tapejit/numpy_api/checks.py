"""`tj.check(pred, msg, *args, **kwargs)`: an assertion in the functions tapejit traces.

On numpy values (no trace open on them) it runs at once: a `pred` with a false element raises
`CheckError` with `msg` formatted by `msg.format(*args, **kwargs)` and the caller's line. On
traced values it records a `check` eqn (ops/effects.py), whose format arguments are the
traced values themselves: `tj.checkify(f)` returns the first failed check's message as an
error value (passes/checkify.py); a transform without checkify refuses to run it (as JAX does).

In the layers: tracing (it reads whether a value is traced), beside the numpy functions.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, CheckError, at_source, user_source
from ..ops import effects
from ..trace import holds_tracer


def failed_message(message: str, src: tuple[str, int] | None) -> str:
    """How a failed check reads (JAX's wording): its message and where it failed."""
    return message if src is None else f"{message} (check failed at {src[0]}:{src[1]})"


def check(pred: Any, msg: str, *args: Any, **kwargs: Any) -> None:
    """Assert that every element of `pred` is true; `msg` (a format string) fills in `args`
    and `kwargs` (arrays or numbers, traced or not) when it is not."""
    if not isinstance(msg, str):
        raise ArgumentError(at_source(f"tj.check's message must be a string, got "
                                      f"{type(msg).__name__}", user_source()))
    names = tuple(map(str, range(len(args)))) + tuple(kwargs)
    values = (*args, *kwargs.values())
    for name, value in zip(names, values):
        if not holds_tracer(value) and np.asarray(value).dtype.kind not in "biufc":
            raise ArgumentError(at_source(
                f"tj.check's format argument {name} must be an array or a number, got "
                f"{type(value).__name__}: format other values into the message itself",
                user_source()))
    if holds_tracer(pred) or any(map(holds_tracer, values)):   # numbers keep their own dtype
        values = tuple(v if holds_tracer(v) else np.asarray(v) for v in values)
        effects.check(pred, *values, msg=msg, names=names)
    elif not np.all(pred):
        text = effects.format_message(msg, names, [np.asarray(v) for v in values])
        raise CheckError(failed_message(text, user_source()))
