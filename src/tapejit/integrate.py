"""`odeint`: ODE solutions that trace, compile and differentiate, as scipy.integrate.odeint is
called (`func(y, t, *args)`, the solution at each of the times `t`).

The solver is Dormand-Prince 5(4) with adaptive steps (Hairer's initial step, error per step
as the RMS of the local error over `atol + rtol * |y|`), one `while_loop` per output interval
inside a `scan` over the times; each output is read off the 4th-order dense output of the
step that passes it. `func` is traced once into a closed tape (values it captures become
inputs, so gradients reach them too), which every stage inlines. The gradient is the adjoint
method (`custom_vjp`): the augmented system (y, its cotangent, the cotangents of t[0] and of
the arguments) is solved backwards interval by interval, so memory does not grow with the
number of steps. An interval not finished within `mxstep` steps gives NaN outputs, and so
does a time before the one before it; a repeated time repeats the solution (as scipy's).
When scipy.integrate is imported, `scipy.integrate.odeint` called with a traced argument
inside a traced function runs `odeint` (scipy's `args=` tuple, `rtol`, `atol`, `mxstep`,
`hmax`; `hmax=0` and `mxstep=0` mean no limit as in scipy).
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

from .autodiff import INPUT, vjp_tape
from .avals import Aval, aval_of
from .control import scan, while_loop
from .control.subtapes import close
from .custom import custom_vjp
from .errors import (ArgumentError, DtypeError, ShapeError, UnsupportedOperationError, at_source,
                     user_source)
from .interpret import inline
from .numpy_api.on_import import on_import
from .pytree import flatten, unflatten
from .trace import Tracer, current_trace

__all__ = ["odeint"]

# Dormand-Prince 5(4): nodes, stage weights (the last row gives the 5th-order solution), the
# 5th minus 4th order weights (the error estimate), and the weights of y at mid-step
_NODES = (1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_STAGES = ((1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
           (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
           (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
           (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_ERROR = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)
_MID = (6025192743 / 30085553152 / 2, 0.0, 51252292925 / 65400821598 / 2,
        -2691868925 / 45128329728 / 2, 187940372067 / 1594534317056 / 2,
        -1776094331 / 19743644256 / 2, 11237099 / 235043384 / 2)


def _combine(weights: tuple, ks: list[Any]) -> Any:
    return sum(w * k for w, k in zip(weights, ks) if w)


def _step(f: Callable, y: Any, f0: Any, t: Any, h: Any) -> tuple:
    """One Dormand-Prince step of size h: (y1, f(y1), local error, stages)."""
    ks = [f0]
    for node, row in zip(_NODES, _STAGES):
        y1 = y + h * _combine(row, ks)
        ks.append(f(y1, t + node * h))
    return y1, ks[-1], h * _combine(_ERROR, ks), ks


def _dense(y0: Any, y1: Any, ks: list[Any], h: Any) -> Any:
    """The quartic p(s), s in [0, 1], through y0, y(mid-step), y1 with slopes h*f0, h*f1:
    its coefficients, highest power first."""
    d = h * ks[0]
    ends, slopes = y1 - y0 - d, h * ks[-1] - d
    mid = 16.0 * (h * _combine(_MID, ks) - 0.5 * d)
    return np.stack([mid - 8.0 * ends + 2.0 * slopes, 14.0 * ends - 3.0 * slopes - 2.0 * mid,
                     mid + slopes - 5.0 * ends, d, y0])


def _rms(x: Any) -> Any:
    return np.sqrt(np.mean(x * x))


def _first_step(f: Callable, y0: Any, f0: Any, t0: Any, rtol: float, atol: float) -> Any:
    """Hairer's guess of a first step size (Solving ODEs I, II.4), for a 5th-order method."""
    scale = atol + rtol * np.abs(y0)
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.maximum(d1, 1e-300))
    h0 = h0.astype(t0.dtype)
    d2 = _rms((f(y0 + h0.astype(y0.dtype) * f0, t0 + h0) - f0) / scale) / h0
    big = np.maximum(d1, d2)
    h1 = np.where(big <= 1e-15, np.maximum(1e-6, h0 * 1e-3),
                  (0.01 / np.maximum(big, 1e-300)) ** (1 / 6))
    return np.minimum(100 * h0, h1).astype(t0.dtype)


def _next_size(dt: Any, ratio: Any) -> Any:
    """The step after one of error ratio `ratio`: grown at most 10x, shrunk (only after a
    rejected step) at most 5x, with safety factor 0.9."""
    factor = 0.9 * np.maximum(ratio, 1e-10) ** -0.2
    factor = np.minimum(np.maximum(factor, np.where(ratio < 1, 1.0, 0.2)), 10.0)
    return dt * factor.astype(dt.dtype)


def _integrate(f: Callable, y0: Any, ts: Any, rtol: float, atol: float, mxstep: float,
               hmax: float) -> Any:
    """The solution of y' = f(y, t), y(ts[0]) = y0 (a vector) at each of ts: (len(ts), n)."""
    f0 = f(y0, ts[0])
    dt = np.minimum(_first_step(f, y0, f0, ts[0], rtol, atol), hmax)

    def interval(carry: tuple, times: tuple) -> tuple:
        target, before = times

        def more(state: tuple) -> Any:
            steps, t, dt = state[0], state[3], state[4]
            going = (t < target) & (dt > 0)
            return going & (steps < mxstep) if np.isfinite(mxstep) else going

        def attempt(state: tuple) -> tuple:
            i, y, fy, t, dt, last_t, coeffs = state
            h = dt.astype(y.dtype)
            y1, f1, error, ks = _step(f, y, fy, t, h)
            ratio = _rms(error / (atol + rtol * np.maximum(np.abs(y), np.abs(y1))))
            new = (y1, f1, t + dt, _dense(y, y1, ks, h), t)
            old = (y, fy, t, coeffs, last_t)
            y, fy, t, coeffs, last_t = (np.where(ratio <= 1, a, b) for a, b in zip(new, old))
            return i + 1, y, fy, t, np.minimum(_next_size(dt, ratio), hmax), last_t, coeffs

        _, *state = while_loop(more, attempt, (np.int64(0),) + carry)
        y, _, t, _, last_t, coeffs = state
        stepped = t > last_t            # (not yet: a first time repeated, y is y0)
        s = ((target - last_t) / np.where(stepped, t - last_t, 1)).astype(y.dtype)
        value = functools.reduce(lambda acc, c: acc * s + c, coeffs[1:], coeffs[0])
        value = np.where(stepped, value, y)
        return tuple(state), np.where((t >= target) & (target >= before), value, np.nan)

    coeffs = np.stack([y0] * 5)
    _, ys = scan(interval, (y0, f0, ts[0], dt, ts[0], coeffs), (ts[1:], ts[:-1]))
    return np.concatenate([y0[None], ys])


# ---- the adjoint -----------------------------------------------------------------------------
class _Problem:
    """A closed dynamics tape `(y, t, *leaves) -> y'` with its VJP tape and the solver's
    options (one per tape and options, so re-traces share it). `attach(ys, y0, ts, *leaves)`
    is the custom_vjp that gives the solution `ys` (solved beside it) the adjoint's
    cotangents, and none to `ys` itself: its VJP rule recomputes `ys`, not the solve, and
    a second derivative still sees how `ys` depends on the inputs."""

    def __init__(self, tape: Any, options: tuple) -> None:
        self.tape, self.options = tape, options
        self.floats = [k for k, v in enumerate(tape.invars[2:]) if v.aval.is_float]
        self.joint = vjp_tape(tape, [0, 1] + [k + 2 for k in self.floats], [INPUT])
        self.attach = custom_vjp(self.solution)
        self.attach.defvjp(self.forward, self.backward)

    def rate(self, leaves: tuple) -> Callable:
        return lambda y, t: inline(self.tape, [y, t, *leaves])[0]

    def odeint(self, y0: Any, ts: Any, *leaves: Any) -> Any:
        return _integrate(self.rate(leaves), y0, ts, *self.options)

    def solution(self, ys: Any, y0: Any, ts: Any, *leaves: Any) -> Any:
        return ys

    def forward(self, ys: Any, y0: Any, ts: Any, *leaves: Any) -> tuple:
        return ys, (ys, ts, leaves)

    def backward(self, residuals: tuple, g: Any) -> tuple:
        """Cotangents of (ys: none, y0, ts, *leaves): the adjoint system solved backwards
        over each interval, from the last time to the first."""
        ys, ts, leaves = residuals
        n, dtype = ys.shape[1], ys.dtype
        params = [leaves[k] for k in self.floats]
        size = sum(p.size for p in params)
        rate = self.rate(leaves)

        def adjoint(z: Any, s: Any) -> Any:
            ydot, ct_y, ct_t, *ct_p = inline(self.joint, [z[:n], -s, *leaves, z[n:2 * n]])
            return np.concatenate([-ydot, ct_y, ct_t.astype(dtype).reshape(1)]
                                  + [c.astype(dtype).reshape(-1) for c in ct_p])

        def interval(carry: tuple, x: tuple) -> tuple:
            a, t0_ct, p_ct = carry
            y, t, t_before, g_here, g_before = x
            t_ct = np.dot(rate(y, t), g_here)
            z = np.concatenate([y, a, (t0_ct - t_ct).reshape(1), p_ct])
            z = _integrate(adjoint, z, np.stack([-t, -t_before]), *self.options)[1]
            return (z[n:2 * n] + g_before, z[2 * n], z[2 * n + 1:]), t_ct.astype(ts.dtype)

        init = (g[-1], np.zeros((), dtype), np.zeros(size, dtype))
        (a, t0_ct, p_ct), t_cts = scan(interval, init, (ys[1:], ts[1:], ts[:-1], g[1:], g[:-1]),
                                       reverse=True)
        ts_ct = np.concatenate([t0_ct.astype(ts.dtype).reshape(1), t_cts])
        cts: list[Any] = [None] * len(leaves)
        offset = 0
        for k, p in zip(self.floats, params):
            cts[k] = p_ct[offset:offset + p.size].reshape(p.shape).astype(p.dtype)
            offset += p.size
        return (None, a, ts_ct, *cts)


@functools.lru_cache(maxsize=256)
def _problem(tape: Any, options: tuple) -> _Problem:
    return _Problem(tape, options)


# ---- the public function ---------------------------------------------------------------------
def _array(x: Any, what: str, src: Any) -> Any:
    if isinstance(x, Tracer):
        return x
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise DtypeError(at_source(f"odeint: {what} holds {x.dtype}, not numbers: pass arrays "
                                   f"of floats", src))
    return x


def _float(x: Any) -> Any:
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _times(t: Any, src: Any) -> Any:
    ts = _float(_array(t, "t", src))
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ShapeError(at_source(f"odeint: t of shape {ts.shape} is not a 1-D array of at "
                                   f"least two times: pass the times to report, first the "
                                   f"time of y0 (e.g. np.linspace(0, 1, 50))", src))
    if not isinstance(ts, Tracer) and not np.all(np.diff(ts) >= 0):
        raise ArgumentError(at_source(f"odeint: t = {ts} is not increasing (repeated times "
                                      f"are allowed, as in scipy): sort the times (np.sort(t))",
                                      src))
    return ts


def _options(rtol: Any, atol: Any, mxstep: Any, hmax: Any, src: Any) -> tuple:
    for name, v in (("rtol", rtol), ("atol", atol), ("mxstep", mxstep), ("hmax", hmax)):
        if isinstance(v, Tracer) or np.ndim(v) or not float(v) > 0:
            raise ArgumentError(at_source(f"odeint: {name}={v!r} must be a positive Python "
                                          f"number", src))
    return float(rtol), float(atol), float(mxstep), float(hmax)


def _dynamics(func: Callable, y_leaves: list, y_td: Any, dtype: np.dtype, ts: Any,
              arg_leaves: list, arg_td: Any, src: Any) -> tuple:
    """`func` traced into a closed tape `(y, t, *arg_leaves, *captured) -> y'` on flat y."""
    sizes = np.cumsum([0] + [leaf.size for leaf in y_leaves])
    expected = [Aval(leaf.shape, leaf.dtype) for leaf in y_leaves]

    def run(v: list) -> list:
        y = unflatten(y_td, [v[0][a:b].reshape(e.shape).astype(e.dtype)
                             for a, b, e in zip(sizes[:-1], sizes[1:], expected)])
        out, out_td = flatten(func(y, v[1], *unflatten(arg_td, v[2:])))
        if out_td != y_td:
            raise ShapeError(at_source(f"odeint: func returns the structure {out_td}, but y0 "
                                       f"has {y_td}: return dy/dt shaped like y", src))
        for leaf, want in zip(out, expected):
            got = leaf.aval if isinstance(leaf, Tracer) else aval_of(np.asarray(leaf))
            if got != want and not (got.shape == want.shape and not isinstance(leaf, Tracer)):
                kind = DtypeError if got.shape == want.shape else ShapeError
                raise kind(at_source(f"odeint: func returns {got} where y0 is {want}: dy/dt "
                                     f"has y's shape and dtype (convert with .astype)", src))
        return [np.concatenate([np.asarray(o, e.dtype).reshape(-1).astype(dtype)
                                if not isinstance(o, Tracer) else o.reshape(-1).astype(dtype)
                                for o, e in zip(out, expected)])]

    return close(run, [Aval((int(sizes[-1]),), dtype), Aval((), ts.dtype)]
                 + [leaf.aval if isinstance(leaf, Tracer) else aval_of(leaf)
                    for leaf in arg_leaves])


def odeint(func: Callable, y0: Any, t: Any, *args: Any, rtol: float = 1.4e-8,
           atol: float = 1.4e-8, mxstep: float = np.inf, hmax: float = np.inf) -> Any:
    """The solution of dy/dt = func(y, t, *args), y(t[0]) = y0, at each time of `t` (1-D,
    increasing): an array (or y0's pytree of them) with a leading axis of len(t).
    Differentiable in y0, t and args (and values func captures), by the adjoint method."""
    src = user_source()
    options = _options(rtol, atol, mxstep, hmax, src)
    ts = _times(t, src)
    y_leaves, y_td = flatten(y0)
    y_leaves = [_float(_array(leaf, "y0", src)) for leaf in y_leaves]
    if not y_leaves:
        raise ArgumentError(at_source("odeint: y0 holds no arrays", src))
    dtype = np.result_type(*[leaf.dtype for leaf in y_leaves])
    arg_leaves, arg_td = flatten(args)
    arg_leaves = [_array(leaf, "args", src) for leaf in arg_leaves]
    tape, captured = _dynamics(func, y_leaves, y_td, dtype, ts, arg_leaves, arg_td, src)
    flat = np.concatenate([leaf.reshape(-1).astype(dtype) for leaf in y_leaves])
    problem, leaves = _problem(tape, options), (*arg_leaves, *captured)
    ys = problem.attach(problem.odeint(flat, ts, *leaves), flat, ts, *leaves)
    sizes = np.cumsum([0] + [leaf.size for leaf in y_leaves])
    return unflatten(y_td, [ys[:, a:b].reshape((ts.shape[0],) + leaf.shape).astype(leaf.dtype)
                            for a, b, leaf in zip(sizes[:-1], sizes[1:], y_leaves)])


# ---- scipy.integrate.odeint and solve_ivp on traced values ----------------------------------
_SCIPY_OPTIONS = ("rtol", "atol", "mxstep", "hmax")
_IVP_OPTIONS = ("rtol", "atol", "max_step", "first_step")


def scipy_odeint(original: Callable, func: Callable, y0: Any, t: Any, args: tuple = (),
                 *rest: Any, **options: Any) -> Any:
    """`original` (scipy's odeint) outside traces; inside one, `odeint` with scipy's
    options (0 or None: scipy's default)."""
    if current_trace() is None:
        return original(func, y0, t, args, *rest, **options)
    unknown = sorted(set(options) - set(_SCIPY_OPTIONS))
    if rest or unknown:
        what = f"the options {unknown}" if unknown else "positional options after args"
        raise UnsupportedOperationError(at_source(
            f"scipy.integrate.odeint: {what} are not supported inside traced code: pass only "
            f"args=, rtol=, atol=, mxstep=, hmax= (by name), or call tj.odeint", user_source()))
    given = {k: v for k, v in options.items() if v is not None and v != 0}
    args = args if isinstance(args, tuple) else (args,)
    return odeint(_arrays(func), np.asarray(y0), t, *args,
                  **{"rtol": 1.49012e-8, "atol": 1.49012e-8, **given})


def _arrays(func: Callable) -> Callable:
    """`func` whose result is an array, as scipy takes it (a list `[v, -k * x]` too)."""
    return lambda *a: np.asarray(func(*a))


def scipy_solve_ivp(original: Callable, fun: Callable, t_span: Any, y0: Any,
                    method: Any = "RK45", t_eval: Any = None, dense_output: bool = False,
                    events: Any = None, vectorized: bool = False, args: Any = None,
                    **options: Any) -> Any:
    """`original` (scipy's solve_ivp) outside traces; inside one, `odeint`'s solver from
    t_span[0] to each time of `t_eval` (which it needs: the times scipy would pick depend on
    the values), with scipy's rtol, atol and max_step, for any `method` (every one returns
    the solution within those tolerances). `success` is a traced bool: no NaN in `y`."""
    if current_trace() is None:
        return original(fun, t_span, y0, method, t_eval, dense_output, events, vectorized,
                        args, **options)
    src = user_source()
    unknown = sorted(set(options) - set(_IVP_OPTIONS))
    if dense_output or events is not None or unknown or t_eval is None:
        what = ("t_eval=None (the times it would choose depend on the values: pass the times "
                "you want, e.g. t_eval=np.linspace(t0, t1, 50))" if t_eval is None else
                "dense_output=True" if dense_output else "events=" if events is not None
                else f"the options {unknown}")
        raise UnsupportedOperationError(at_source(
            f"scipy.integrate.solve_ivp: {what} is not supported inside traced code (t_eval, "
            f"args, rtol, atol, max_step are), or call tj.odeint", src))
    t0, t1 = t_span
    times = _float(_array(t_eval, "t_eval", src))
    if not any(isinstance(v, Tracer) for v in (t0, t1, times)):
        if not t1 > t0 or times.ndim != 1 or not (t0 <= times.min() and times.max() <= t1):
            raise ArgumentError(at_source(
                f"scipy.integrate.solve_ivp: t_span={tuple(t_span)} and t_eval must run "
                f"forward, t_eval inside t_span (traced code integrates forward only)", src))
    start = not isinstance(times, Tracer) and not isinstance(t0, Tracer) and times[0] == t0
    ts = times if start else np.concatenate([np.reshape(t0, (1,)).astype(times.dtype), times])
    y0 = np.asarray(y0)
    if y0.ndim != 1:
        raise ShapeError(at_source(f"scipy.integrate.solve_ivp: y0 of shape {y0.shape} is not "
                                   f"1-D", src))
    hmax = options.get("max_step", np.inf)
    ys = odeint(_arrays(lambda y, t, *a: fun(t, y, *a)), y0, ts,
                *(() if args is None else args if isinstance(args, tuple) else (args,)),
                rtol=options.get("rtol", 1e-3), atol=options.get("atol", 1e-6), hmax=hmax)
    y = np.transpose(ys if start else ys[1:])
    finished = np.all(np.isfinite(y))
    result = getattr(sys.modules.get("scipy.integrate._ivp.ivp"), "OdeResult", dict)
    return result(t=times, y=y, sol=None, t_events=None, y_events=None, nfev=0, njev=0, nlu=0,
                  status=np.where(finished, 0, -1), success=finished,
                  message="tapejit's Dormand-Prince solver in a traced function: success "
                          "is False where an interval gave NaN")


def _install(module: Any) -> None:
    """Route scipy.integrate's odeint and solve_ivp through this module's, as it is imported
    (`from scipy.integrate import solve_ivp` after `import tapejit` gets them)."""
    for name, routed in (("odeint", scipy_odeint), ("solve_ivp", scipy_solve_ivp)):
        original = getattr(module, name, None)
        if original is not None and not getattr(original, "_tapejit", False):
            wrapper = functools.wraps(original)(functools.partial(routed, original))
            wrapper._tapejit = True      # type: ignore[attr-defined]
            setattr(module, name, wrapper)


on_import("scipy.integrate", _install)
