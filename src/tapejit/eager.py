"""Eager recording: a trace that computes every value as it records it (GradientTape's).

`EagerTrace.record` records an eqn like any trace, then runs the op's numpy implementation on
the recorded values (`values`: var name -> array), so user code sees concrete values while
they are recorded: an `EagerTracer` converts to its value (`float(loss)`, `if loss > 0:`,
`print(y)`), and `tj.Variable`s among the operands are read as the trace's recorded value of
them. A numpy function no rule records runs on the values (its result is a constant), unless
an operand depends on a watched value while a tape records (`EagerTrace.connected`): then the
gradient through it would be lost, and it raises UnsupportedOperationError as in `tj.grad`;
so does converting such a value to a numpy array (`np.asarray` inside a library).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import numpy as np

from .avals import aval_of
from .errors import (IndexOutOfBoundsError, UnsupportedOperationError, at_source, function_name,
                     user_source)
from .guards import caller_source
from .interpret import located
from .ir import Lit, Var
from .numpy_api.operators import BINARY
from .trace import (FUNCTION_RULES, METHOD_RULES, UFUNC_RULES, Trace, Tracer, refresh,
                    trace_of, var_of)
from .variables import Variable


class EagerTracer(Tracer):
    """A recorded value whose concrete value is known: it converts like an array."""

    __slots__ = ()

    @property
    def value(self) -> np.ndarray:
        if self._stale:
            refresh(self)
        return trace_of(self).values[var_of(self).name]

    def numpy(self) -> np.ndarray:
        return self.value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        connected = _connected([self])
        if connected is not None:
            raise UnsupportedOperationError(at_source(
                f"Converting a recorded value ({connected.aval}) that depends on a watched value "
                f"to a numpy array (np.asarray, called by a numpy function tapejit does not "
                f"record or by another library) inside a GradientTape would lose the gradient "
                f"through it.\n  Compute with supported numpy functions, or read the value as a "
                f"constant explicitly with `.numpy()`.", caller_source()))
        return np.asarray(self.value, dtype)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        return self.value.__index__()

    def __complex__(self) -> complex:
        return complex(self.value)

    def item(self, *args: Any) -> Any:
        return self.value.item(*args)

    def tolist(self) -> Any:
        return self.value.tolist()

    # Variables among the operands are read first (their recorded values); what no rule
    # records runs on the values (the result is a constant, as numpy code outside a tape),
    # unless that would lose a gradient
    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in FUNCTION_RULES:
            return super().__array_function__(func, types, _read(args), _read(kwargs))
        _refuse_if_connected(function_name(func), (args, kwargs))
        return func(*_values(args), **_values(kwargs))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if (ufunc in UFUNC_RULES if method == "__call__" else method in METHOD_RULES):
            return super().__array_ufunc__(ufunc, method, *_read(inputs), **kwargs)
        _refuse_if_connected(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else
                                                          f".{method}"), (inputs, kwargs))
        return getattr(ufunc, method)(*_values(inputs), **_values(kwargs))

    def __format__(self, spec: str) -> str:
        return format(self.value[()] if self.value.ndim == 0 else self.value, spec)

    def __repr__(self) -> str:
        return f"recorded {self.value!r}"

    def __str__(self) -> str:
        return str(self.value)


def _operator(name: str) -> Callable[[Any, Any], Any]:
    base = getattr(Tracer, name)
    return lambda self, other: base(self, _read(other))


for _name in BINARY:
    for _form in (f"__{_name}__", f"__r{_name}__"):
        setattr(EagerTracer, _form, _operator(_form))


class EagerTrace(Trace):
    """A trace that also computes every recorded value (`values`: var name -> array)."""

    replays = False    # the user's code runs again on every step: random draws are fresh
    closes = False     # recorded values stay readable after the tape ends

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.values: dict[str, Any] = {}
        self.recording: list[Any] = []       # the GradientTapes recording now
        self.variables: dict[int, tuple[Variable, np.ndarray, EagerTracer]] = {}
        # the vars watched by a tape and those computed from them while a tape recorded
        self.connected: set[str] = set()

    def atom(self, x: Any, dtype: np.dtype | None = None) -> Any:
        if isinstance(x, Variable):
            x = self.read_variable(x)
        elif isinstance(x, EagerTracer) and trace_of(x) is not self:
            x = x.value                     # a value recorded by an earlier tape: a constant
        return super().atom(x, dtype)

    def _const(self, x: Any, aval: Any) -> Var:
        var = super()._const(x, aval)
        self.values.setdefault(var.name, np.asarray(x))
        return var

    def record(self, op: Any, args: Sequence[Any], params: dict[str, Any]) -> Any:
        out = super().record(op, args, params)
        eqn = self.eqns[-1]
        if self.recording and any(isinstance(a, Var) and a.name in self.connected
                                  for a in eqn.ins):
            self.connected.update(o.name for o in eqn.outs if o.aval.is_float)
        try:
            result = op.impl(*(self.value_of(a) for a in eqn.ins), **params)
        except (IndexOutOfBoundsError, MemoryError, np.linalg.LinAlgError) as err:
            raise located(err, eqn) from None    # as the interpreter says them
        results = result if len(eqn.outs) > 1 else (result,)
        for var, value in zip(eqn.outs, results):
            self.values[var.name] = np.asarray(value, var.aval.dtype)
        for tracer in (out if isinstance(out, tuple) else (out,)):
            tracer.__class__ = EagerTracer
        return out

    def value_of(self, atom: Any) -> Any:
        if isinstance(atom, Lit):
            return atom.aval.dtype.type(atom.value)
        return self.values[atom.name]

    def read_variable(self, variable: Variable) -> EagerTracer:
        """The tracer of `variable`'s current value in this trace (a constant var named after
        it), watched by the recording tapes that watch it."""
        entry = self.variables.get(id(variable))
        if entry is None or entry[1] is not variable._value:
            value = variable._value
            var = self.new_var(aval_of(value), re.sub(r"\W", "_", variable.name))
            self.constvars.append(var)
            self.consts.append(value)
            self.values[var.name] = value
            entry = self.variables[id(variable)] = (variable, value, EagerTracer(self, var))
        for tape in self.recording:
            if (tape.watch_accessed_variables and variable.trainable) or \
                    id(variable) in tape._variables:
                tape._watch_variable(variable, var_of(entry[2]))
        return entry[2]


def type_for(trace: Trace) -> type:
    """The tracer class of a trace's values."""
    return EagerTracer if isinstance(trace, EagerTrace) else Tracer


def _connected(operands: Any) -> EagerTracer | None:
    """An operand (nested in lists, tuples and dicts) whose value a recording tape would
    differentiate: it depends on a watched value."""
    if isinstance(operands, EagerTracer):
        trace = trace_of(operands)
        return operands if trace.recording and var_of(operands).name in trace.connected else None
    if isinstance(operands, (list, tuple)):
        return next((c for c in map(_connected, operands) if c is not None), None)
    if isinstance(operands, dict):
        return _connected(list(operands.values()))
    return None


def _refuse_if_connected(name: str, operands: Any) -> None:
    """Raise where `name` would run on values that a recording tape differentiates."""
    connected = _connected(operands)
    if connected is not None:
        raise UnsupportedOperationError(at_source(
            f"{name} is not supported on traced arrays: inside a GradientTape it would run "
            f"on the values of a recorded {connected.aval} that depends on a watched value, "
            f"and the gradient through it would be lost.\n  Compute it with the supported "
            f"numpy functions (docs/api.md lists them), or, if its result is meant as a "
            f"constant, call it inside `with tape.stop_recording():`.", user_source()))


def _values(x: Any) -> Any:
    """`x` (nested in lists, tuples and dicts) with recorded values replaced by arrays."""
    if isinstance(x, EagerTracer):
        return x.value
    if isinstance(x, (list, tuple)):
        return type(x)(map(_values, x))
    if isinstance(x, dict):
        return {k: _values(v) for k, v in x.items()}
    return x


def _read(x: Any) -> Any:
    """`x` (nested in lists, tuples and dicts) with Variables replaced by what they read."""
    if isinstance(x, Variable):
        return x.read()
    if isinstance(x, (list, tuple)):
        return type(x)(map(_read, x))
    if isinstance(x, dict):
        return {k: _read(v) for k, v in x.items()}
    return x


def unwrap(x: Any) -> Any:
    """A Variable's or recorded value's array (other values as they are)."""
    if isinstance(x, Variable):
        return x._value
    if isinstance(x, EagerTracer):
        return x.value
    return x
