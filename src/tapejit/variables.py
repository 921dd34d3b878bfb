"""`tj.Variable`: a named, mutable parameter that numpy code can use like an array.

Outside a tape a Variable reads as its array. Inside a recording `GradientTape` a read gives
the tape's recorded value of it (a constant var named after the Variable), which the tapes that
watch it differentiate (trainable Variables are watched automatically unless the tape says
`watch_accessed_variables=False`). `assign` replaces the array (a tape that recorded the old
value keeps it). Inside `tj.jit` or another transform a Variable cannot be read: pass its value
as an argument and assign the result outside.

Below eager.py in the layers: a recording trace reads a Variable with its `read_variable`
method (eager.EagerTrace), which this module calls without importing eager.py.
"""
from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from .errors import ArgumentError, DtypeError, ShapeError, at_source, user_source
from .trace import Tracer, current_trace

_counter = itertools.count(1)


class Variable:
    """`tj.Variable(value, name=None, trainable=True, dtype=None)`."""

    __array_priority__ = 2000
    __hash__ = None  # type: ignore[assignment]  (== is elementwise, as for arrays)

    def __init__(self, initial_value: Any, name: str | None = None, trainable: bool = True,
                 dtype: Any = None) -> None:
        value = np.array(_value_of(initial_value), dtype=dtype)
        object.__setattr__(self, "_value", value)
        self.name = name or f"Variable{next(_counter)}"
        self.trainable = trainable

    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)
    size = property(lambda self: self._value.size)

    def numpy(self) -> np.ndarray:
        """A copy of the current value."""
        return self._value.copy()

    def assign(self, value: Any) -> "Variable":
        given = np.asarray(_value_of(value))
        if not np.can_cast(given.dtype, self.dtype, "same_kind"):
            raise DtypeError(at_source(f"Variable {self.name}: cannot assign a {given.dtype} "
                                       f"value to a {self.dtype} variable (numpy's same_kind "
                                       f"casting, as `x -= 0.7` on an int array): make the "
                                       f"variable float, or round the value", user_source()))
        new = np.array(given, dtype=self.dtype)
        if new.shape != self.shape:
            raise ShapeError(at_source(f"Variable {self.name}: cannot assign a value of shape "
                                       f"{new.shape} to a variable of shape {self.shape}",
                                       user_source()))
        object.__setattr__(self, "_value", new)
        return self

    def assign_add(self, delta: Any) -> "Variable":
        return self.assign(self._value + _value_of(delta))

    def assign_sub(self, delta: Any) -> "Variable":
        return self.assign(self._value - _value_of(delta))

    def read(self) -> Any:
        """The value to compute with here: the array, or inside a tape its recorded value."""
        trace = current_trace()
        if trace is None:
            return self._value
        read_variable = getattr(trace, "read_variable", None)   # an eager.EagerTrace's
        if read_variable is not None:
            return read_variable(self)
        raise ArgumentError(at_source(
            f"Variable {self.name} was read inside a traced function (tj.jit, tj.grad, ...), "
            f"where its value would be baked in: pass {self.name}.numpy() as an argument and "
            f"assign the result outside", user_source()))

    # -- numpy protocols: compute with the value ---------------------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if current_trace() is not None:     # a clear error inside a transform's trace, and
            return self.read().__array__(dtype)     # inside a tape if it loses a gradient
        return np.asarray(self._value, dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return getattr(ufunc, method)(*map(_read, inputs), **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return func(*map(_read_nested, args), **{k: _read_nested(v) for k, v in kwargs.items()})

    def __getitem__(self, index: Any) -> Any:
        return self.read()[index]

    def __getattr__(self, name: str) -> Any:     # .T, .sum(), .reshape(), ...
        if name.startswith("__") or name == "_value":
            raise AttributeError(name)
        return getattr(self.read(), name)

    def __len__(self) -> int:
        return len(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __repr__(self) -> str:
        return f"<tj.Variable {self.name!r} shape={self.shape} dtype={self.dtype} " \
               f"value={np.array2string(self._value, threshold=8)}>"


def _value_of(x: Any) -> Any:
    if isinstance(x, Variable):
        return x._value
    if isinstance(x, Tracer):
        value = getattr(x, "value", None)
        if value is None:
            raise ArgumentError(at_source("Variable.assign: a traced value cannot be assigned "
                                          "(assign outside tj.jit)", user_source()))
        return value
    return x


def _read(x: Any) -> Any:
    return x.read() if isinstance(x, Variable) else x


def _read_nested(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(map(_read_nested, x))
    return _read(x)


def _binary(op: Any) -> tuple[Any, Any]:
    return (lambda self, other: op(self.read(), _read(other)),
            lambda self, other: op(_read(other), self.read()))


for _name, _op in {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                   "truediv": operator.truediv, "floordiv": operator.floordiv,
                   "mod": operator.mod, "pow": operator.pow, "matmul": operator.matmul}.items():
    _forward, _reflected = _binary(_op)
    setattr(Variable, f"__{_name}__", _forward)
    setattr(Variable, f"__r{_name}__", _reflected)
for _name, _op in {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                   "eq": operator.eq, "ne": operator.ne}.items():
    setattr(Variable, f"__{_name}__", _binary(_op)[0])
Variable.__neg__ = lambda self: -self.read()          # type: ignore[attr-defined]
Variable.__pos__ = lambda self: self.read()           # type: ignore[attr-defined]
Variable.__abs__ = lambda self: abs(self.read())      # type: ignore[attr-defined]
