"""The exception hierarchy.

Every error tapejit raises is a `TapejitError`. Each subclass also derives from the built-in
exception a numpy user would expect (`TypeError`, `ValueError`, ...), so existing `except`
clauses keep working. Messages name the operation, the shapes/dtypes and the user's source line,
and say what to do instead.
"""
from __future__ import annotations

import functools
import linecache
import os
import re
import sys
import warnings
from typing import Any

import numpy as np


class TapejitError(Exception):
    """Base class of every tapejit error."""


class UnsupportedOperationError(TapejitError, NotImplementedError):
    """A numpy function, ufunc method or Python operation tapejit cannot trace."""


class UnsupportedAttributeError(UnsupportedOperationError, AttributeError):
    """An ndarray method or attribute traced arrays do not have (`x.put`, `x.strides`); also an
    AttributeError, so `hasattr` stays False."""


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


class NotCallableError(ArgumentError, TypeError):
    """A transform was given something that is not a function (`tj.grad(3.0)`)."""


class IntegerOverflowError(ArgumentError, OverflowError):
    """A Python int argument beyond int64, the dtype tapejit computes Python ints in."""


class IndexingError(TapejitError, IndexError):
    """An index that numpy refuses too: out of bounds, or an array of floats."""


class LeakedTracerError(TapejitError, RuntimeError):
    """A traced value used after the trace that made it ended (kept in a global, a closure or
    an attribute instead of returned)."""


class CompiledMismatchError(TapejitError, AssertionError):
    """TAPEJIT_VERIFY: a compiled program disagreed with the interpreter (a tapejit bug)."""


class IRError(TapejitError, ValueError):
    """A malformed tape: a typecheck failure or unparsable tape text."""


class CheckError(TapejitError, ValueError):
    """A failed `tj.check` or a NaN that `tj.checkify` found: the check's message (its values
    filled in) or the op that made the NaN, and the user's line (JAX's JaxRuntimeError is a
    ValueError too)."""


class UncheckedError(TapejitError, ValueError):
    """A `tj.check` in a program run without `tj.checkify` (JAX's error for a check staged out
    without checkify is a ValueError too)."""


class IndexOutOfBoundsError(IndexingError):
    """An index outside its axis: numpy's message, the op and the user's line. A constant
    index raises it while tracing (op "indexing"), a traced one while the program runs, on
    every backend (the interpreter, the compiled program's status slots, the CUDA host
    calls); an op's numpy code raises it without `op` and `src`, which the interpreter adds
    (`located`)."""

    def __init__(self, index: int, axis: int, size: int, op: str | None = None,
                 src: tuple[str, int] | None = None) -> None:
        self.index, self.axis, self.size, self.op, self.src = int(index), axis, size, op, src
        where = "" if op is None else f" ({op}{f' at {src[0]}:{src[1]}' if src else ''})"
        valid = (f"valid indices are -{size} to {size - 1} (negative ones count from the "
                 f"end). Check the array's shape, or clip the index (np.clip(i, -{size}, "
                 f"{size - 1}))" if size else "the axis is empty: no index is valid")
        super().__init__(f"index {self.index} is out of bounds for axis {axis} with size "
                         f"{size}{where}: {valid}")

    def __reduce__(self) -> tuple:
        return IndexOutOfBoundsError, (self.index, self.axis, self.size, self.op, self.src)

    def located(self, op: str, src: tuple[str, int] | None) -> "IndexOutOfBoundsError":
        """This error as raised by `op` at the user's line `src`."""
        return IndexOutOfBoundsError(self.index, self.axis, self.size, op, src)


class OutOfMemoryError(TapejitError, MemoryError):
    """An array a program needed could not be allocated: its size in bytes, and the ops that
    make arrays of that size (op, user's line, type), where the tape has any; where the size
    is not known (numba's allocator does not say it), the ops that make the program's largest
    arrays. The interpreter raises it where numpy raises MemoryError, a compiled program where
    its allocator got no memory: the call then stops, its outputs dropped (never a crash)."""

    def __init__(self, nbytes: int | None,
                 makers: tuple[tuple[str, Any, str], ...] = ()) -> None:
        self.nbytes, self.makers = nbytes, tuple(makers)
        made = "; ".join(f"{op}{f' at {src[0]}:{src[1]}' if src else ''} makes {kind}"
                         for op, src, kind in self.makers[:3])
        size = "" if nbytes is None else f" of {_bytes(nbytes)}"
        if made and nbytes is None:
            made = f"its largest arrays: {made}"
        super().__init__(
            f"tapejit: out of memory: an array{size} could not be allocated"
            f"{f' ({made})' if made else ''}. numpy would need the same array: make the "
            f"inputs smaller, or compute in parts (a loop over slices of the batch)")

    def __reduce__(self) -> tuple:
        return OutOfMemoryError, (self.nbytes, self.makers)


class LinAlgError(TapejitError, np.linalg.LinAlgError):
    """A matrix a linear-algebra op cannot use (singular, not positive definite, holding NaN
    where LAPACK refuses it): numpy's message, the op and the user's line. The interpreter
    raises it where numpy's code does; a compiled program that fails runs the call again on
    the interpreter, which names the op (so both say the same). `except
    np.linalg.LinAlgError` catches it."""

    def __init__(self, reason: str, op: str | None = None,
                 src: tuple[str, int] | None = None) -> None:
        self.reason, self.op, self.src = reason, op, src
        where = "" if op is None else f" ({op}{f' at {src[0]}:{src[1]}' if src else ''})"
        super().__init__(f"{reason.rstrip('.')}{where}. Check the matrix, or regularise it "
                         f"(add a small multiple of the identity)")

    def __reduce__(self) -> tuple:
        return LinAlgError, (self.reason, self.op, self.src)


def _bytes(n: int) -> str:
    """`n` bytes as numpy's MemoryError says it (`29.1 TiB`; negative: 2**63 or more)."""
    if n < 0:
        return "8 EiB or more"
    size, unit = float(n), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{n} bytes" if unit == "bytes" else f"{size:.3g} {unit}"


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_SKIP = (_PKG_DIR, _NUMPY_DIR, "<__array_function__")


def user_source() -> tuple[str, int] | None:
    """The innermost stack frame outside tapejit and numpy: the user's line (the place errors
    and warnings name)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        internal = _INTERNAL.get(code)
        if internal is None:
            internal = _INTERNAL[code] = code.co_filename.startswith(_SKIP)
        if not internal:
            return code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


_INTERNAL: dict[object, bool] = {}   # code object -> whether it is tapejit's or numpy's


@functools.cache
def library_dirs(standard: bool = False) -> tuple[str, ...]:
    """Where installed libraries live, and with `standard` the standard library (read when
    first asked: sysconfig takes 1 ms to import)."""
    import sysconfig
    keys = ("purelib", "platlib") + (("stdlib", "platstdlib") if standard else ())
    return tuple({sysconfig.get_paths()[key] for key in keys})


def library_error(what: str, aval: object) -> ConcretizationError | None:
    """The error for a traced value that an installed library's function (scipy's, ...; not
    numpy's), called by the user's code, needs as a number or a numpy array: that call named,
    at the user's line. None where the user's own code needs it."""
    frame, inner, outer = sys._getframe(1), None, None
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP + library_dirs()):
        if not frame.f_code.co_filename.startswith(_SKIP):
            inner, outer = inner or frame, frame
        frame = frame.f_back
    if outer is None or frame is None:
        return None
    called = _called(frame)
    if called is not None:
        name = function_name(called)
    else:
        module = ".".join(p for p in str(outer.f_globals.get("__name__")).split(".")
                          if not p.startswith("_"))
        name = f"{module}.{getattr(outer.f_code, 'co_qualname', outer.f_code.co_name)}"
    return ConcretizationError(at_source(
        f"{name} cannot be traced: {what} in its code ({inner.f_code.co_filename}:"
        f"{inner.f_lineno}) needs the concrete value of a traced array ({aval}). Call it "
        f"outside the traced function, on numbers, or write what it computes with numpy "
        f"functions, which trace.", (frame.f_code.co_filename, frame.f_lineno)))


def _called(frame: Any) -> Any:
    """The function that the call running at `frame`'s line names, as `function`,
    `module.function` or `alias.function` on one line (`st.entropy(p)`: scipy.stats.entropy,
    whose code runs in a decorator's wrapper); None for any other call."""
    try:
        line, end, col, end_col = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        text = linecache.getline(frame.f_code.co_filename, line)[col:end_col]
    except (AttributeError, IndexError, TypeError, ValueError):     # (Python < 3.11)
        return None
    parts = text.split("(", 1)[0].strip().split(".")
    if line != end or not all(p.isidentifier() for p in parts):
        return None
    found = frame.f_locals.get(parts[0], frame.f_globals.get(parts[0]))
    for part in parts[1:]:
        if not isinstance(found, type(sys)):        # through modules only: no code runs
            return None
        found = found.__dict__.get(part)
    return found if callable(found) and hasattr(found, "__module__") and \
        hasattr(found, "__name__") else None


def at_source(message: str, src: tuple[str, int] | None) -> str:
    """Append the user's source line to an error message."""
    if src is None:
        return message
    return f"{message}\n  at {src[0]}:{src[1]}"


def function_name(func: Any) -> str:
    """A numpy function's public name: numpy.fft.fft, not numpy.fft._pocketfft.fft."""
    module = ".".join(p for p in str(func.__module__).split(".") if not p.startswith("_"))
    return f"{module}.{func.__name__}"


def ufunc_name(ufunc: np.ufunc) -> str:
    """A ufunc's public name: numpy.exp, scipy.special.gamma (a ufunc of neither: its own)."""
    for module in ("numpy", "scipy.special"):
        if getattr(sys.modules.get(module), ufunc.__name__, None) is ufunc:
            return f"{module}.{ufunc.__name__}"
    return ufunc.__name__


# Python's math functions whose numpy function has another name (the others: the same name)
_NUMPY_OF_MATH = {"fabs": "abs", "pow": "power", "acos": "arccos", "asin": "arcsin",
                  "atan": "arctan", "atan2": "arctan2", "acosh": "arccosh", "asinh": "arcsinh",
                  "atanh": "arctanh", "erf": "scipy.special.erf", "erfc": "scipy.special.erfc",
                  "gamma": "scipy.special.gamma", "lgamma": "scipy.special.gammaln",
                  "fsum": "sum"}


def math_hint(src: tuple[str, int] | None) -> str:
    """A bullet for an error at a line calling Python's `math` module, which converts its
    argument to a Python float: numpy's function of that name traces. "" for other lines."""
    found = re.search(r"\bmath\.(\w+)\s*\(", linecache.getline(*src)) if src else None
    if found is None:
        return ""
    name = found.group(1)
    instead = _NUMPY_OF_MATH.get(name, name)
    instead = instead if instead.startswith("scipy.") else f"np.{instead}"
    return (f"  - `math.{name}` works on Python floats only and converts its argument to one: "
            f"write `{instead}(...)`, which traces;\n")


def user_error(message: str) -> ArgumentError:
    """An ArgumentError whose message ends with the user's source line."""
    return ArgumentError(at_source(message, user_source()))


def require_callable(fn: object, transform: str) -> None:
    """Raise at the user's line when a transform is given something it cannot call."""
    if not callable(fn):
        raise NotCallableError(at_source(
            f"{transform} expects a function, but got a {type(fn).__name__} ({fn!r:.40}). Pass "
            f"the function itself, not the result of calling it (f, not f(x)).",
            user_source()))


class TapejitWarning(UserWarning):
    """Something works but is probably not what was meant (e.g. a function re-traced on
    every call)."""


def warn_at_user(message: str) -> None:
    """Warn with a TapejitWarning attributed to the user's source line."""
    src = user_source() or ("<unknown>", 0)
    warnings.warn_explicit(message, TapejitWarning, src[0], src[1])
