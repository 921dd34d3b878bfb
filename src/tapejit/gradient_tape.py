"""`GradientTape`: TensorFlow-style eager recording, with the reverse sweep compiled and replayed.

Outside any trace, entering a tape opens an `EagerTrace` (eager.py): a trace that also computes
each value as it records it, so user code sees concrete values. Tapes entered inside an open
trace (nested tapes; a tape inside `tj.jit`) record into that trace instead.

A tape remembers the spans of eqns recorded while it was active and the vars it watches
(`watch(x)`, and every trainable `tj.Variable` read while it records). `gradient` cuts those
eqns into a tape from the sources (then every other value they read) to the targets:
ops that did not read a watched value are constants, and so are values computed under
`stop_recording()`. The reverse sweep of that tape (`derived_tapes.split_joint`) reads the forward
values as inputs. Outside any trace it runs compiled, cached by the cut tape (its text: ops,
names, shapes and dtypes; numba's program is shape-generic, so a new batch size re-derives but
does not recompile): a training loop that records the same ops every step replays compiled
code from its second step. The sweeps are a transform record of their own (tape_sweeps.py). Inside a trace the sweep is inlined, so a second tape can
differentiate it again and `tj.jit` compiles the whole step.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from .transforms.arguments import refuse_subclass
from .avals import aval_of
from .backends import check_backend
from .errors import (ArgumentError, DtypeError, TapejitError, at_source, user_source,
                     warn_at_user)
from .interpret import inline
from .eager import EagerTrace, EagerTracer, type_for, unwrap
from .ir import Tape, Var
from .passes import dce
from .pytree import flatten, unflatten
from .trace import Trace, Tracer, current_trace, trace_of, var_of
from .tape_sweeps import Recorded, run_sweep, sweep_cache, sweep_key
from .transforms.builder import build
from .variables import Variable


class TapeError(TapejitError, RuntimeError):
    """A GradientTape used in a way it cannot serve (e.g. a second gradient call on a
    non-persistent tape)."""


class GradientTape:
    """Records operations on watched values for reverse-mode differentiation (TensorFlow's
    `tf.GradientTape`): `with tj.GradientTape() as tape: x = tape.watch(x); y = f(x)`, then
    `tape.gradient(y, x)`. `tj.Variable`s read inside are watched automatically.
    `backend` runs the compiled reverse sweeps ("numba" or "interpret"; default TAPEJIT_BACKEND).
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True,
                 backend: str | None = None) -> None:
        check_backend(backend)
        self.persistent, self.watch_accessed_variables = persistent, watch_accessed_variables
        self.backend = backend
        self._trace: Trace | None = None
        self._owner = False            # this tape opened the trace
        self._spans: list[tuple[int, int]] = []
        self._start: int | None = None  # where the open span began (None: not recording)
        self._watched: dict[str, Var] = {}
        self._variables: dict[int, Any] = {}   # watched variables, by id
        self._used = False

    # -- recording ---------------------------------------------------------------------------
    def __enter__(self) -> "GradientTape":
        if self._start is not None:
            raise TapeError(at_source("this GradientTape is already recording",
                                      user_source()))
        trace = current_trace()
        if trace is None:
            trace = EagerTrace(0)
            trace.__enter__()
            self._owner = True
        elif self._trace is not None and trace is not self._trace:
            raise TapeError(at_source("a GradientTape can record again only where it recorded "
                                      "first (inside the same trace)", user_source()))
        self._trace = trace
        self._resume()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pause()
        if self._owner:
            self._owner = False
            assert self._trace is not None
            self._trace.__exit__()

    def _resume(self) -> None:
        assert self._trace is not None
        self._start = len(self._trace.eqns)
        if isinstance(self._trace, EagerTrace):
            self._trace.recording.append(self)

    def _pause(self) -> None:
        if self._start is None or self._trace is None:
            return
        self._spans.append((self._start, len(self._trace.eqns)))
        self._start = None
        if isinstance(self._trace, EagerTrace) and self in self._trace.recording:
            self._trace.recording.remove(self)

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Operations inside are not recorded by this tape (their results are constants)."""
        if self._start is None:
            raise TapeError(at_source("stop_recording: the tape is not recording",
                                      user_source()))
        self._pause()
        try:
            yield
        finally:
            self._resume()

    def reset(self) -> None:
        """Forget everything recorded and watched (recording goes on inside the block)."""
        self._spans, self._watched, self._variables = [], {}, {}
        if self._start is not None and self._trace is not None:
            self._start = len(self._trace.eqns)

    def watch(self, x: Any) -> Any:
        """Watch `x` (a pytree of arrays, recorded values or Variables) and return it: numpy
        arrays come back as recorded values, which are what the computation must use."""
        if self._start is None or self._trace is None:
            raise TapeError(at_source("watch: call it inside the tape's `with` block",
                                      user_source()))
        leaves, td = flatten(x)
        return unflatten(td, [self._watch_leaf(leaf) for leaf in leaves])

    def _watch_leaf(self, leaf: Any) -> Any:
        trace = self._trace
        assert trace is not None
        if isinstance(leaf, Variable):
            self._variables[id(leaf)] = leaf
            if isinstance(trace, EagerTrace):
                entry = trace.variables.get(id(leaf))
                if entry is not None and entry[1] is leaf._value:
                    self._watch_variable(leaf, var_of(entry[2]))
            return leaf
        refuse_subclass(leaf, "watch: the value")
        if isinstance(leaf, Tracer) and trace_of(leaf) is trace:
            tracer = leaf
        else:
            value = np.asarray(leaf.value if isinstance(leaf, EagerTracer) else leaf)
            if isinstance(leaf, Tracer):
                raise TapeError(at_source("watch: the value belongs to another trace",
                                          user_source()))
            tracer = type_for(trace)(trace, trace._const(value, aval_of(value)))
        if not tracer.aval.is_float:
            raise DtypeError(at_source(f"watch: only floating-point values can be "
                                       f"differentiated, not {tracer.aval}", user_source()))
        self._watch_var(var_of(tracer))
        return tracer

    def _watch_variable(self, variable: Any, var: Var) -> None:
        self._variables[id(variable)] = variable
        self._watch_var(var)

    def _watch_var(self, var: Var) -> None:
        self._watched[var.name] = var
        if isinstance(self._trace, EagerTrace):
            self._trace.connected.add(var.name)

    def watched_variables(self) -> tuple:
        """The Variables this tape watches, in the order they were first watched."""
        return tuple(self._variables.values())

    # -- differentiation ---------------------------------------------------------------------
    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: str = "none") -> Any:
        """d(sum of targets)/d(sources), with the structure of `sources`: `target` and
        `sources` are pytrees; `output_gradients` (the targets' structure) weights the
        targets; a source the targets do not depend on gets None, or zeros with
        `unconnected_gradients="zero"`."""
        self._check_usable("gradient", unconnected_gradients)
        t_leaves, t_td = flatten(target)
        s_leaves, s_td = flatten(sources)
        active = self._active()
        sources_ = [self._source(s, active) for s in s_leaves]
        targets = [self._target(t, active) for t in t_leaves]
        cts = self._output_gradients(output_gradients, t_leaves, t_td)
        live = [(v, ct) for v, ct in zip(targets, cts) if v is not None]
        wrt = list(dict.fromkeys(v.name for v in sources_ if v is not None))
        grads: dict[str, Any] = {}
        if live and wrt:
            grads = self._reverse(wrt, [v for v, _ in live], [ct for _, ct in live])
        result = [self._unconnected(s, unconnected_gradients) if v is None or
                  grads.get(v.name) is None else grads[v.name]
                  for s, v in zip(s_leaves, sources_)]
        self._consume()
        return unflatten(s_td, result)

    def jacobian(self, target: Any, source: Any, unconnected_gradients: str = "none") -> Any:
        """The Jacobian of `target` (one array) with respect to `source` (a pytree): blocks of
        shape target.shape + source_leaf.shape, computed by one program."""
        self._check_usable("jacobian", unconnected_gradients)
        s_leaves, s_td = flatten(source)
        active = self._active()
        sources_ = [self._source(s, active) for s in s_leaves]
        var = self._target(target, active)
        wrt = list(dict.fromkeys(v.name for v in sources_ if v is not None))
        blocks: dict[str, Any] = {}
        if var is not None and wrt:
            blocks = self._jacobian(wrt, var)
        t_shape = np.shape(target)
        result = [blocks[v.name] if v is not None and v.name in blocks else
                  self._unconnected_block(s, t_shape, unconnected_gradients)
                  for s, v in zip(s_leaves, sources_)]
        self._consume()
        return unflatten(s_td, result)

    def batch_jacobian(self, target: Any, source: Any,
                       unconnected_gradients: str = "none") -> Any:
        """Per example b of the leading (batch) axis, d target[b] / d source[b]: shape
        (batch,) + target.shape[1:] + source.shape[1:] (examples must be independent)."""
        t_shape, s_shape = np.shape(target), np.shape(unwrap(source))
        if not t_shape or not s_shape or t_shape[0] != s_shape[0]:
            raise ArgumentError(at_source(
                f"batch_jacobian: target {t_shape} and source {s_shape} need the same leading "
                f"(batch) axis", user_source()))
        full = self.jacobian(target, source, unconnected_gradients)
        if full is None:
            return None
        b, t, s = t_shape[0], int(np.prod(t_shape[1:])), int(np.prod(s_shape[1:]))
        blocks = np.reshape(full, (b, t, b, s)) * np.eye(b)[:, None, :, None]
        return np.reshape(np.sum(blocks, axis=2), (b,) + t_shape[1:] + s_shape[1:])

    # -- the parts -----------------------------------------------------------------------
    def _check_usable(self, what: str, unconnected: str) -> None:
        if unconnected not in ("none", "zero"):
            raise ArgumentError(at_source(f"{what}: unconnected_gradients must be 'none' or "
                                          f"'zero', not {unconnected!r}", user_source()))
        if self._used:
            raise TapeError(at_source(
                f"GradientTape.{what}: this non-persistent tape was already used (and freed "
                f"what it recorded); create it with persistent=True to call gradient or "
                f"jacobian more than once", user_source()))
        if self._trace is None:
            raise TapeError(at_source(f"GradientTape.{what}: the tape recorded nothing (use "
                                      f"it as `with tj.GradientTape() as tape:`)",
                                      user_source()))

    def _consume(self) -> None:
        if not self.persistent:
            self._used = True
            self._trace, self._spans, self._watched, self._variables = None, [], {}, {}

    def _source(self, leaf: Any, active: set[str]) -> Var | None:
        """The var of a source, or None when the tape never saw it connected."""
        trace = self._trace
        if isinstance(leaf, Variable):
            entry = trace.variables.get(id(leaf)) if isinstance(trace, EagerTrace) else None
            if entry is None:       # (its last value read while recording, assigned since or not)
                return None
            var = var_of(entry[2])
            if not var.aval.is_float:
                _warn_int_source(leaf)
                return None
        elif isinstance(leaf, Tracer):
            if trace_of(leaf) is not trace:
                return None
            var = var_of(leaf)
        else:
            raise ArgumentError(at_source(
                f"gradient: a source is a {type(leaf).__name__} that was never watched; "
                f"watch it inside the tape (`x = tape.watch(x)`) and compute with the value "
                f"watch returns, or use a tj.Variable", user_source()))
        return var if var.name in active else None

    def _target(self, leaf: Any, active: set[str]) -> Var | None:
        if isinstance(leaf, Tracer) and trace_of(leaf) is self._trace:
            return var_of(leaf) if var_of(leaf).name in active else None
        return None

    def _eqn_indices(self) -> Iterator[int]:
        spans = list(self._spans)
        if self._start is not None and self._trace is not None:
            spans.append((self._start, len(self._trace.eqns)))
        for start, stop in spans:
            yield from range(start, stop)

    def _active(self) -> set[str]:
        """The vars that depend on a watched var through eqns this tape recorded."""
        assert self._trace is not None
        active = set(self._watched)
        for i in self._eqn_indices():
            eqn = self._trace.eqns[i]
            if any(isinstance(a, Var) and a.name in active for a in eqn.ins):
                active.update(o.name for o in eqn.outs if o.aval.is_float)
        return active

    def _cut(self, wrt: list[str], targets: list[Var]) -> Tape:
        """The recorded eqns from the sources to the targets as a tape: inputs are the
        sources, then every other value those eqns read."""
        trace = self._trace
        assert trace is not None
        active, sources = set(self._watched) | set(wrt), set(wrt)
        eqns = []
        for i in self._eqn_indices():
            eqn = trace.eqns[i]
            if any(o.name in sources for o in eqn.outs):
                continue
            if any(isinstance(a, Var) and a.name in active for a in eqn.ins):
                eqns.append(eqn)
                active.update(o.name for o in eqn.outs if o.aval.is_float)
        avals = {v.name: v for e in eqns for v in e.ins + e.outs if isinstance(v, Var)}
        avals.update((t.name, t) for t in targets)
        src_vars = [avals.get(name) or self._watched[name] for name in wrt]
        tape = dce(Tape(tuple(src_vars), tuple(eqns), tuple(targets)))
        defined = {o.name for e in tape.eqns for o in e.outs} | sources
        free: dict[str, Var] = {}
        for atom in [a for e in tape.eqns for a in e.ins] + list(tape.outvars):
            if isinstance(atom, Var) and atom.name not in defined:
                free.setdefault(atom.name, atom)
        return Tape(tuple(src_vars) + tuple(free.values()), tape.eqns, tape.outvars)

    def _output_gradients(self, given: Any, leaves: list[Any], td: Any) -> list[Any]:
        if given is None:
            return [None] * len(leaves)
        g_leaves, g_td = flatten(given)
        if g_td != td:
            raise ArgumentError(at_source(f"gradient: output_gradients has structure {g_td}, "
                                          f"but the target has structure {td}", user_source()))
        for g, t in zip(g_leaves, leaves):
            if np.shape(g) != np.shape(t):
                raise ArgumentError(at_source(
                    f"gradient: an output gradient of shape {np.shape(g)} for a target of "
                    f"shape {np.shape(t)}", user_source()))
        return g_leaves

    def _reverse(self, wrt: list[str], targets: list[Var], cts: list[Any]) -> dict[str, Any]:
        """The gradients (by source name) of the targets weighted by `cts` (None: ones)."""
        sub = self._cut(wrt, targets)
        seeds = [np.ones(v.aval.shape, v.aval.dtype) if ct is None else ct
                 for v, ct in zip(targets, cts)]
        outs = self._run(Recorded([], [], sub, "gradient", len(wrt)), seeds)
        return {name: g for name, g in zip(wrt, outs) if name in _read_by(sub)}

    def _jacobian(self, wrt: list[str], target: Var) -> dict[str, Any]:
        sub = self._cut(wrt, [target])
        outs = self._run(Recorded([], [], sub, "jacobian", len(wrt)), [])
        return {name: j for name, j in zip(wrt, outs) if name in _read_by(sub)}

    def _run(self, call: Recorded, extra: list[Any]) -> list[Any]:
        """Run a sweep's program on the recorded values: inlined into the open trace (so it
        is recorded or compiled with it), else compiled and cached."""
        trace = self._trace
        assert trace is not None
        if current_trace() is not None:
            tape = build(sweep_cache(self.backend), call, sweep_key(call)).tape
            tracers = [Tracer(trace, v) for v in tape.invars[:len(tape.invars) - len(extra)]]
            return inline(tape, tracers + [unwrap(e) if not isinstance(e, Tracer) else e
                                           for e in extra])
        assert isinstance(trace, EagerTrace)
        extra = [np.asarray(unwrap(e)) for e in extra]
        return run_sweep(self.backend, call, trace.values.__getitem__, extra)

    def _unconnected(self, source: Any, policy: str) -> Any:
        return None if policy == "none" else np.zeros_like(unwrap(source))

    def _unconnected_block(self, source: Any, t_shape: tuple, policy: str) -> Any:
        if policy == "none":
            return None
        value = np.asarray(unwrap(source))
        return np.zeros(t_shape + value.shape, value.dtype)


def _warn_int_source(variable: Variable) -> None:
    """TensorFlow's answer for an integer source: None, with a warning."""
    warn_at_user(
        f"GradientTape: Variable {variable.name!r} has dtype {variable.dtype}; only "
        f"floating-point values have gradients, so its gradient is None (as in TensorFlow). "
        f"Make it a float Variable to differentiate it: tj.Variable(value, dtype=np.float64).")


def _read_by(tape: Tape) -> set[str]:
    """The vars a tape's eqns or outputs read (a source outside it is unconnected)."""
    return {a.name for e in tape.eqns for a in e.ins if isinstance(a, Var)} | {
        o.name for o in tape.outvars if isinstance(o, Var)}
