"""Tracing: `Tracer` values record every op applied to them into a `Trace`, which becomes a Tape.

Each `Trace` has a level; traces nest (a transform called inside another transform's trace opens
a deeper one). An op applied to tracers records into the deepest trace among its arguments;
tracers of shallower traces, and numpy arrays, enter it as constants. Calling an `Op` on no
tracers simply evaluates it (so rules may mix traced and concrete values freely).

`Tracer` speaks numpy: `__array_ufunc__`, `__array_function__`, and the operators, methods and
indexing the numpy_api package installs, all route to the lowering rules it registers in
`UFUNC_RULES` and `FUNCTION_RULES`.
A tracer is mutable only through index assignment (`x[i] = v`), which rebinds it to a new var
(`rebind`; views of it are read again, `as_view`). A trace that has ended leaves its tracers
dead: one kept outside its function and used again raises `LeakedTracerError` (GradientTape's
eager traces excepted: their values are concrete). Recording a whole function into a tape is
recording.py's.
"""
from __future__ import annotations

import operator
import threading
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from . import ops
from .avals import Aval, aval_of
from .errors import (ConcretizationError, LeakedTracerError, TapejitError,
                     UnsupportedAttributeError, UnsupportedOperationError, at_source,
                     function_name, library_error, math_hint, ufunc_name, user_source)
from .ir import Atom, Eqn, Lit, Src, Tape, Var, make_params
from .ops import Op
from .ops import layout as L

class _TraceStack(threading.local):
    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.src: Src | None = None  # when set, the source line recorded on new eqns
        # (level, found): the inputs assigned into by the function traced at that level
        self.assigned: tuple[int, list[int]] | None = None
        self.buffers: dict[Src, int] = {}   # trace_to_tape: line -> the traces that set it
        self.guarded: tuple[int, list] | None = None   # (level, found): collecting_guards


_stack = open_traces = _TraceStack()   # open_traces.traces: this thread's, innermost last


def _nothing(replays: bool) -> None:
    return None


# called as a recording opens and closes, with its `replays` (installed by guards.py)
_open_hooks: tuple[Callable[[bool], None], Callable[[bool], None]] = (_nothing, _nothing)


def set_open_hooks(opened: Callable[[bool], None], closed: Callable[[bool], None]) -> None:
    """Installed once by guards.py (which wraps numpy functions while a trace is open), so
    this module depends on nothing above it."""
    global _open_hooks
    _open_hooks = (opened, closed)


class Trace:
    """An open recording: equations so far, the constants captured, the names in use."""

    replays = True    # the recording is replayed on later calls (numpy.random is an error)
    closes = True     # its tracers are dead once it ends (using one is a LeakedTracerError)

    def __init__(self, level: int) -> None:
        self.level = level
        self.open, self.ended = False, False
        self.eqns: list[Eqn] = []
        self.constvars: list[Var] = []
        self.consts: list[Any] = []
        self._const_ids: dict[int, Var] = {}
        self._names: set[str] = set()
        self._counter = 0
        self.reverse_start: int | None = None  # set when an inlined joint tape's sweep begins
        # where trace_to_tape knows the call: a tracer's value (None: not computable), and
        # the values the function asked for, as (var, value)
        self.evaluate: Callable[[Tracer], np.ndarray | None] | None = None
        self.guards: list[tuple[Var, np.ndarray]] = []

    def __enter__(self) -> "Trace":
        _open_hooks[0](self.replays)
        _stack.traces.append(self)
        self.open = True                # (a GradientTape's values outlive its closed trace)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack.traces.pop()
        self.open, self.ended = False, self.closes
        _open_hooks[1](self.replays)

    def extend(self, tape: Tape) -> list["Tracer"]:
        """Continue recording after `tape`'s eqns (used by autodiff to append the reverse
        sweep); returns tracers for its inputs."""
        self.eqns = list(tape.eqns)
        self.constvars, self.consts = list(tape.constvars), list(tape.consts)
        self._const_ids = {id(c): v for v, c in zip(tape.constvars, tape.consts)}
        self._names = {v.name for v in tape.invars + tape.constvars}
        self._names.update(o.name for e in tape.eqns for o in e.outs)
        return [Tracer(self, v) for v in tape.invars]

    def new_var(self, aval: Aval, name: str | None = None, prefix: str = "v") -> Var:
        if name is None or name in self._names:
            base = name or prefix
            while True:
                self._counter += 1
                name = f"{base}{self._counter}" if base == prefix else f"{base}_{self._counter}"
                if name not in self._names:
                    break
        self._names.add(name)
        return Var(name, aval)

    def new_tracer(self, aval: Aval, name: str | None = None, weak: bool = False) -> "Tracer":
        return Tracer(self, self.new_var(aval, name), weak)

    def atom(self, x: Any, dtype: np.dtype | None = None) -> Atom:
        """The var or literal that stands for `x` in this trace."""
        if isinstance(x, (Var, Lit)):
            return x
        if isinstance(x, Tracer):
            if x._stale:
                refresh(x)
            if x._trace is self:
                return x._var
            if x._trace.ended:
                raise leaked(x)
            return self._const(x, x.aval)
        if isinstance(x, np.ndarray) and x.ndim > 0:
            return self._const(x, aval_of(x))
        value = np.asarray(x, dtype=dtype if not isinstance(x, (np.ndarray, np.generic)) else None)
        return Lit(value.item(), aval_of(value))

    def _const(self, x: Any, aval: Aval) -> Var:
        var = self._const_ids.get(id(x))
        if var is None:
            var = self.new_var(aval, prefix="c")
            self._const_ids[id(x)] = var
            self.constvars.append(var)
            self.consts.append(x)     # (held: its id keys _const_ids)
        return var

    def record(self, op: Op, args: Sequence[Any], params: dict[str, Any]) -> Any:
        """Record `op` on `args`: its output tracer (a tuple of them for several outputs)."""
        if self.ended:
            raise leaked(next(a for a in args if isinstance(a, Tracer)))
        ins = []
        for a in args:   # fast path: every argument is a current tracer of this trace
            if type(a) is not Tracer or a._trace is not self or a._stale:
                dtypes = [_dtype_of(a) for a in args]
                hint = next((d for d in dtypes if d is not None and d != _BOOL), None)
                ins = [self.atom(a, hint) for a in args]
                break
            ins.append(a._var)
        src = _stack.src or user_source()
        packed = make_params(params) if params else ()
        avals = tuple(a.aval for a in ins)
        key = (op.name, avals, packed)
        aval = _SHAPES.get(key)
        if aval is None:
            try:
                aval = _SHAPES[key] = op.shape(*avals, **params)
            except TapejitError as err:
                raise type(err)(at_source(str(err), src)) from None
        if op.multiple_results:
            outs = tuple(self.new_var(a) for a in aval)
            self.eqns.append(Eqn(op.name, tuple(ins), outs, packed, src))
            return tuple(Tracer(self, o) for o in outs)
        out = self.new_var(aval)
        self.eqns.append(Eqn(op.name, tuple(ins), (out,), packed, src))
        return Tracer(self, out)

    def to_tape(self, invars: Sequence[Var], outs: Sequence[Any]) -> Tape:
        outvars = tuple(self.atom(o) for o in outs)
        return Tape(tuple(invars), tuple(self.eqns), outvars, tuple(self.constvars),
                    tuple(_plain(c) for c in self.consts), self.reverse_start)


def _plain(const: Any) -> Any:
    """A constant as the tape holds it: an ndarray subclass's data as a plain ndarray (the
    `Constant`s of recording.py, np.matrix: the tape's ops have ndarray semantics)."""
    if isinstance(const, np.ndarray) and type(const) is not np.ndarray:
        return const.view(np.ndarray)
    return const


_BOOL = np.dtype(np.bool_)
_SHAPES: dict[tuple, Aval] = {}  # (op, input avals, params) -> output aval: rules are pure


def _dtype_of(x: Any) -> np.dtype | None:
    if isinstance(x, Tracer):
        return x.aval.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return None


class recording_source:
    """Within this context, new eqns carry `src` (e.g. the primal line of a VJP rule)."""

    def __init__(self, src: Src | None) -> None:
        self.src = src

    def __enter__(self) -> None:
        self.saved, _stack.src = _stack.src, self.src

    def __exit__(self, *exc: Any) -> None:
        _stack.src = self.saved


def current_trace() -> Trace | None:
    return _stack.traces[-1] if _stack.traces else None


# A tracer's trace and var, for the transforms built on traces. (Functions, not attributes: a
# tracer's own `x.var()` and `x.trace()` are numpy's ndarray methods.)
def var_of(tracer: "Tracer") -> Var:
    """The var that holds `tracer` in its trace."""
    return tracer._var


def trace_of(tracer: "Tracer") -> Trace:
    """The trace `tracer` was recorded on."""
    return tracer._trace


def new_trace() -> Trace:
    """A trace one level deeper than the current one (enter it with `with`)."""
    return Trace(len(_stack.traces))


def bind(op: Op, args: tuple, params: dict[str, Any]) -> Any:
    """Record `op` on the deepest open trace among the tracer arguments, or evaluate it."""
    trace = None
    for a in args:
        if isinstance(a, Tracer) and a._trace is not trace and (trace is None or (
                a._trace.open, a._trace.level) > (trace.open, trace.level)):
            trace = a._trace
    if trace is None:
        return op.impl(*(np.asarray(a) for a in args), **params)
    return trace.record(op, args, params)


def bind_recorded(op: Op, args: Sequence[Any], params: dict[str, Any]) -> Any:
    """Like `bind`, but ops on constants only are recorded into the current trace rather than
    evaluated (inlining a tape must not turn its broadcasts into big constant arrays)."""
    if any(isinstance(a, Tracer) for a in args):
        return bind(op, tuple(args), params)
    trace = current_trace()
    return trace.record(op, args, params) if trace else op.impl(*args, **params)


ops.set_binder(bind)

# numpy lowering tables, filled by the numpy_api package: ufunc -> rule, numpy function -> rule
UFUNC_RULES: dict[Any, Callable[..., Any]] = {}
FUNCTION_RULES: dict[Any, Callable[..., Any]] = {}
METHOD_RULES: dict[str, Callable[..., Any]] = {}   # ufunc methods: "reduce", "at", ...


def leaked(tracer: "Tracer") -> LeakedTracerError:
    """The error for a tracer used after its trace ended: where it was made, where it is used."""
    trace, var = tracer._trace, tracer._var
    made = next((e.src for e in trace.eqns if var in e.outs), None)
    origin = (f"made at {made[0]}:{made[1]}" if made else
              "an argument of the traced function (or a value made from one)")
    return LeakedTracerError(at_source(
        f"A traced value ({tracer.aval}, {origin}) is used after the trace that made it ended: "
        f"it was kept outside the traced function (a global or outer list, a closure, an "
        f"attribute) and holds no number, only a place in a finished recording.\n"
        f"  Return it from the function instead (with has_aux=True for grad/value_and_grad), "
        f"or keep a concrete copy computed outside the transform.", user_source()))


def guarded_value(tracer: "Tracer") -> np.ndarray | None:
    """`tracer`'s value, where its trace can compute it from the call being traced (`Trace.
    evaluate`); the program then holds only for calls giving the same value, a guard the
    trace keeps (`Trace.guards`). None where it cannot."""
    trace = tracer._trace
    if tracer._stale:
        refresh(tracer)
    if trace.evaluate is None or trace.ended:
        return None
    value = trace.evaluate(tracer)
    if value is not None:
        trace.guards.append((tracer._var, value))
    return value


def _concrete(tracer: "Tracer", what: str, numbers: bool = False) -> np.ndarray:
    """The guarded value of `tracer`, or the concretization error. `numbers`: it is read as
    a number (float(), .item()): refused for floats, whose derivative it would drop silently
    (a branch, an index or int() has a zero derivative anyway)."""
    number = numbers and tracer.dtype.kind in "fc"
    value = None if number else guarded_value(tracer)
    if value is None:
        known = number and tracer._trace.evaluate is not None
        raise _concretization(what, tracer, _NUMBER if known else _UNKNOWN)
    return value


_NUMBER = ("it reads a traced float as a Python number, which would drop its derivative "
           "silently (a Python `if`, int() or an index on a traced value work: tapejit computes "
           "the value and guards the program on it)")
_UNKNOWN = ("this trace cannot compute it: tapejit follows a branch on a value of the call "
            "(guarding the program on it), but not inside tj.vmap on a per-example value, in a "
            "tj.fori_loop/scan/while_loop body on a per-step value, in tj.jvp, in "
            "tj.make_tape, or with TAPEJIT_STRICT=1")


def _concretization(what: str, tracer: "Tracer", why: str, extra: str = ""
                    ) -> ConcretizationError:
    error = library_error(what, tracer.aval)      # in scipy's code, say: name that call
    if error is not None:
        return error
    src = user_source()
    return ConcretizationError(at_source(
        f"{what} needs the concrete value of a traced array ({tracer.aval}), but {why}.\n"
        f"{math_hint(src)}"
        f"  - for a value-dependent choice write `np.where(cond, a, b)` (or `tj.where`): both "
        f"sides are computed, one is selected per element;\n"
        f"  - for a Python `if` on a traced value write `tj.cond(pred, true_fn, false_fn, "
        f"*operands)`, e.g.\n"
        f"        y = tj.cond(x > 0, lambda x: np.sqrt(x), lambda x: -x, x)\n"
        f"    (both branches are traced; the compiled program runs the one `pred` picks); a "
        f"`while` on a traced value is `tj.while_loop(cond_fn, body_fn, init)`;\n"
        f"  - to build an array from traced values write np.array([a, b]) or np.stack, or assign "
        f"into a buffer made inside the function (`out = np.zeros(n); out[i] = traced`),\n"
        f"    not into an array made outside it;\n"
        f"  - pass values that really are constants through `static_argnums`.{extra}", src))


class Tracer:
    """A traced array: an aval and the var that holds it in its trace."""

    __slots__ = ("_trace", "_var", "weak", "_base", "_view", "_views", "_stale", "__weakref__")
    __array_priority__ = 1000
    __hash__ = None  # type: ignore[assignment]  (like ndarray: unhashable)

    def __init__(self, trace: Trace, var: Var, weak: bool = False) -> None:
        self._trace = trace
        self._var = var
        self.weak = weak  # a Python scalar argument: promotes like one (numpy's NEP 50)
        self._base: Tracer | None = None  # set when numpy would return a view of _base
        self._view: View | None = None  # how to read it from _base and write it back
        self._views: list[weakref.ref[Tracer]] | None = None  # (weak: dead views drop out)
        self._stale = False  # a view whose base was assigned into since

    # --- static properties ------------------------------------------------------------------
    aval = property(lambda self: self._var.aval)
    shape = property(lambda self: self._var.aval.shape)
    dtype = property(lambda self: self._var.aval.dtype)
    ndim = property(lambda self: len(self._var.aval.shape))
    size = property(lambda self: self._var.aval.size)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized traced array (shape ())")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        return f"Tracer<{self.aval}:{self._var.name}>"

    # --- numpy protocols ----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "__call__" and kwargs.get("out") is None and kwargs.get("where", True) is True:
            rule = UFUNC_RULES.get(ufunc)
            if rule is None:
                raise _unsupported(ufunc_name(ufunc), UFUNC_RULES)
            dtype = kwargs.get("dtype")
            result = rule(*inputs)
            return result if dtype is None else result.astype(dtype)
        rule = METHOD_RULES.get(method)      # (a call with out= or where=: "__call__"'s rule)
        if rule is None:
            raise UnsupportedOperationError(at_source(
                f"{ufunc_name(ufunc)}.{method} is not supported on traced arrays (supported: "
                f"{', '.join(m for m in sorted(METHOD_RULES) if m[0] != '_')})", user_source()))
        return rule(ufunc, *inputs, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        rule = FUNCTION_RULES.get(func)
        if rule is None:
            raise _unsupported(function_name(func), FUNCTION_RULES)
        return rule(*args, **kwargs)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise _concretization("Converting to a numpy array (np.asarray/np.array)", self,
            "a numpy array holds numbers, not a traced value with its derivative",
            "\n  - to index a numpy array made outside the function by a traced integer array, "
            "write `np.array(table)[idx]` (arrays made inside, e.g. `np.eye(k)[labels]`, "
            "index directly).")

    # --- concretization: the value, where the trace knows it (a guard), else an error ------------
    def __bool__(self) -> bool:
        return bool(_concrete(self, "A Python `if`/`while`/`and`/`or` (bool())"))

    def __float__(self) -> float:
        return float(_concrete(self, "float()", numbers=True))

    def __int__(self) -> int:
        return int(_concrete(self, "int()"))

    def __index__(self) -> int:
        return operator.index(_concrete(self, "Using a traced value as a Python index "
                                              "(__index__)")[()])

    def __complex__(self) -> complex:
        return complex(_concrete(self, "complex()", numbers=True))

    def item(self, *args: Any) -> Any:
        return _concrete(self, ".item()", numbers=True).item(*args)

    def __getattr__(self, name: str) -> Any:
        """Only reached for attributes tracers lack: an ndarray one gets a clear error."""
        if name.startswith("__") or not hasattr(np.ndarray, name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        raise UnsupportedAttributeError(at_source(
            f"x.{name} (numpy's ndarray.{name}) is not supported on traced arrays ({self.aval}): "
            f"a traced array is a value, not memory, so buffer attributes (strides, flags, base, "
            f"data) have no meaning (windows: sliding_window_view), and other in-place methods "
            f"than index assignment, fill, sort and partition are not recorded. Write `x[idx] = "
            f"v` for writes, and use the numpy function where there is one.", user_source()))

    def tolist(self) -> Any:
        return _concrete(self, ".tolist()", numbers=True).tolist()


def holds_tracer(x: Any) -> bool:
    """Whether `x` is a tracer, or a list, tuple or slice holding one (at any depth)."""
    if isinstance(x, slice):
        x = (x.start, x.stop, x.step)
    return isinstance(x, Tracer) or isinstance(x, (list, tuple)) and any(map(holds_tracer, x))


def lift(x: Any) -> Any:
    """A constant as a tracer of the current trace (to index or assign into it)."""
    if isinstance(x, Tracer):
        return x
    trace, arr = current_trace(), np.asarray(x)
    if trace is None:
        return arr
    if arr.ndim:
        return Tracer(trace, trace.atom(arr))
    return trace.record(L.broadcast_in_dim, (arr,), {"shape": (), "dims": ()})


def _unsupported(name: str, table: dict) -> UnsupportedOperationError:
    supported = sorted({getattr(k, "__name__", str(k)) for k in table})
    return UnsupportedOperationError(at_source(
        f"{name} is not supported on traced arrays.\n  Supported: {', '.join(supported)}",
        user_source()))


class View(NamedTuple):
    """How a view relates to its base: `read(base)` computes it, `write(base, new)` assigns a
    new value of the view into the base."""

    read: Callable[[Any], Any]
    write: Callable[[Any, Any], None]


def as_view(base: Any, result: Any, view: View) -> Any:
    """Mark `result` as what numpy returns as a view of `base` (basic indexing, reshape,
    transpose, ...). tapejit computes views as new values; to keep numpy's semantics an
    assignment into the view is written back into the base, and a view whose base was assigned
    into since is read again from the base before its next use."""
    if isinstance(base, Tracer) and isinstance(result, Tracer) and result is not base:
        result._base, result._view = base, view
        if base._views is None:
            base._views = []
        base._views.append(weakref.ref(result))
    return result


def _mark_stale(views: "list[weakref.ref[Tracer]] | None") -> None:
    """Views (and their views) must be read again from their bases before their next use;
    views nobody holds any more are forgotten."""
    if not views:
        return
    alive = [view for view in (ref() for ref in views) if view is not None]
    views[:] = [weakref.ref(view) for view in alive]
    for view in alive:
        view._stale = True
        _mark_stale(view._views)


def refresh(view: Tracer) -> None:
    """Re-read a stale view from its (updated) base."""
    assert view._base is not None and view._view is not None
    fresh = view._view.read(view._base)
    view._trace, view._var, view._stale = fresh._trace, fresh._var, False


def rebind(tracer: Tracer, value: Tracer) -> None:
    """Point `tracer` at a new value: the functional form of in-place assignment. A view
    writes the value through to its base; views of `tracer` become stale."""
    if tracer._base is not None and tracer._view is not None:
        tracer._view.write(tracer._base, value)
    _mark_stale(tracer._views)
    tracer._trace, tracer._var, tracer.weak = value._trace, value._var, value.weak
    tracer._stale = False
