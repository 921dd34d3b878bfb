"""The exception hierarchy.

Every error tapejit raises is a `TapejitError`. Each subclass also derives from the built-in
exception a numpy user would expect (`TypeError`, `ValueError`, ...), so existing `except`
clauses keep working. Messages name the operation, the shapes/dtypes and the user's source line,
and say what to do instead.
"""
from __future__ import annotations


class TapejitError(Exception):
    """Base class of every tapejit error."""


class UnsupportedOperationError(TapejitError, NotImplementedError):
    """A numpy function, ufunc method or Python operation tapejit cannot trace."""


class ConcretizationError(TapejitError, TypeError):
    """A traced value was needed as a concrete Python value (`bool`, `float`, `if`, ...)."""


class RandomnessError(UnsupportedOperationError):
    """numpy.random used while tracing: the numbers would be drawn once and replayed."""


class ShapeError(TapejitError, ValueError):
    """Operands whose shapes do not fit the operation."""


class DtypeError(TapejitError, TypeError):
    """A dtype that the operation or transform cannot accept (e.g. differentiating an int)."""


class ArgumentError(TapejitError, ValueError):
    """A transform was called with arguments that do not fit it (argnums, outputs, pytrees)."""


class CompiledMismatchError(TapejitError, AssertionError):
    """TAPEJIT_VERIFY: a compiled program disagreed with the interpreter (a tapejit bug)."""


class IRError(TapejitError, ValueError):
    """A malformed tape: a typecheck failure or unparsable tape text."""


def at_source(message: str, src: tuple[str, int] | None) -> str:
    """Append the user's source line to an error message."""
    if src is None:
        return message
    return f"{message}\n  at {src[0]}:{src[1]}"


class TapejitWarning(UserWarning):
    """Something works but is probably not what was meant (e.g. a function re-traced on
    every call)."""
