"""User-defined derivatives: `custom_vjp`, `stop_gradient`, and Numba kernels as primitives.

- `@tj.custom_vjp` + `f.defvjp(fwd, bwd)`: on traced arguments `f` runs `fwd` (ordinary traced
  ops) and marks each output leaf with a `custom_vjp_call` eqn whose VJP runs `fwd` again for
  its residuals and then `bwd`, both traced: the reverse sweep is ordinary IR, so the rule works
  under grad of grad, jvp (by transposition), hessian and jit, and compiles. On concrete
  arguments `f` itself runs.
- `tj.stop_gradient(x)`: x, through which no cotangent flows.
- `tj.njit_primitive(kernel, vjp=...)`: a Numba `@njit` function as a primitive (`njit_call`);
  the interpreter calls it from Python, generated code calls it directly (it is a global of every
  generated module, named after its qualified name and a hash of its source, so a changed
  kernel is a new program).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import re
import threading
from typing import Any, Callable

import numpy as np

from .avals import Aval
from .disk import store
from .errors import ArgumentError, at_source, require_callable, user_source
from .ops import custom as C
from .pytree import TreeDef, flatten, tree_map, unflatten
from .trace import Tracer


def stop_gradient(x: Any) -> Any:
    """`x` (a pytree) as a value through which no gradient flows."""
    return tree_map(lambda leaf: C.stop_gradient(leaf) if isinstance(leaf, Tracer) else leaf, x)


class _CallSite:
    """A custom_vjp function applied to one argument and output structure: the `RULES`
    entry whose `vjp` the `custom_vjp_call` eqns of such calls run."""

    def __init__(self, fn: "custom_vjp", in_td: TreeDef, out_td: TreeDef) -> None:
        self.fn, self.in_td, self.out_td = fn, in_td, out_td

    def vjp(self, ct: Any, ys: tuple, xs: tuple, index: int) -> list[Any]:
        args = unflatten(self.in_td, list(xs))
        _, residuals = self.fn.run_fwd(*args)
        cts = [ct if j == index else np.zeros_like(y) for j, y in enumerate(ys)]
        grads = self.fn.bwd(residuals, unflatten(self.out_td, cts))
        name = self.fn.__name__
        if not isinstance(grads, tuple) or len(grads) != len(args):
            raise ArgumentError(at_source(
                f"custom_vjp {name}: bwd must return a tuple with one cotangent (or None) per "
                f"positional argument of {name} ({len(args)}), not {type(grads).__name__}"
                f"{f' of length {len(grads)}' if isinstance(grads, tuple) else ''}",
                _where(self.fn.bwd)))
        flat: list[Any] = []
        for k, (g, arg) in enumerate(zip(grads, args)):
            arg_leaves, arg_td = flatten(arg)
            if g is None:
                flat += [None] * len(arg_leaves)
                continue
            g_leaves, g_td = flatten(g)
            if g_td != arg_td:
                raise ArgumentError(at_source(
                    f"custom_vjp {name}: bwd's cotangent for argument {k} has structure "
                    f"{g_td}, but the argument has structure {arg_td}", _where(self.fn.bwd)))
            flat += g_leaves
        return flat


def _where(fn: Callable[..., Any]) -> tuple[str, int] | None:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


class custom_vjp:
    """`@tj.custom_vjp def f(*args)`, then `f.defvjp(fwd, bwd)`: `fwd(*args) -> (out,
    residuals)`, `bwd(residuals, ct) -> one cotangent (or None) per positional argument`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        require_callable(fn, "tj.custom_vjp")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._sites: dict[tuple[TreeDef, TreeDef], str] = {}
        self._in_fwd = threading.local()    # fwd may call f: that call is the plain f

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> "custom_vjp":
        require_callable(fwd, f"{self.__name__}.defvjp (its fwd)")
        require_callable(bwd, f"{self.__name__}.defvjp (its bwd)")
        self.fwd, self.bwd = fwd, bwd
        self._sites.clear()
        return self

    def __call__(self, *args: Any) -> Any:
        leaves, in_td = flatten(args)
        if getattr(self._in_fwd, "active", False) or not any(
                isinstance(leaf, Tracer) for leaf in leaves):
            return self.fn(*args)
        if self.fwd is None:
            raise ArgumentError(at_source(
                f"custom_vjp {self.__name__} has no rule: call {self.__name__}.defvjp(fwd, "
                f"bwd) before differentiating it", user_source()))
        out, _ = self.run_fwd(*args)
        out_leaves, out_td = flatten(out)
        rule = self._site(in_td, out_td)
        n = len(out_leaves)
        return unflatten(out_td, [C.custom_vjp_call(*out_leaves, *leaves, rule=rule, index=k,
                                                    n_out=n) for k in range(n)])

    def run_fwd(self, *args: Any) -> tuple[Any, Any]:
        """`fwd(*args)`, in which calls of this function are the plain function."""
        self._in_fwd.active = True
        try:
            result = self.fwd(*args)
        finally:
            self._in_fwd.active = False
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ArgumentError(at_source(
                f"custom_vjp {self.__name__}: fwd must return a pair (output, residuals), not "
                f"a {type(result).__name__}", _where(self.fwd)))
        return result

    def _site(self, in_td: TreeDef, out_td: TreeDef) -> str:
        name = self._sites.get((in_td, out_td))
        if name is None:
            name = _unique(f"{self.__name__}")
            C.RULES[name] = _CallSite(self, in_td, out_td)
            self._sites[in_td, out_td] = name
        return name


def _unique(base: str) -> str:
    """`base`, or `base_2`, `base_3`, ...: the first name no rule has."""
    base = re.sub(r"\W", "_", base)
    name, k = base, 1
    while name in C.RULES:
        k += 1
        name = f"{base}_{k}"
    return name


class NjitPrimitive:
    """A Numba `@njit` kernel as a differentiable primitive (see `njit_primitive`)."""

    def __init__(self, kernel: Any, vjp: Callable[..., Any] | None,
                 shape: Callable[..., Any] | None) -> None:
        py_func = getattr(kernel, "py_func", None)
        if py_func is None:
            raise ArgumentError(at_source(
                f"njit_primitive: {kernel!r} is not a Numba @njit function (decorate it with "
                f"numba.njit)", user_source()))
        functools.update_wrapper(self, py_func)
        self.kernel, self._vjp, self._shape = kernel, vjp, shape
        try:
            text = inspect.getsource(py_func)
        except (OSError, TypeError):
            text = repr(py_func.__code__.co_code)
        digest = hashlib.sha256(f"{py_func.__module__}.{py_func.__qualname__}\n{text}"
                                .encode()).hexdigest()[:10]
        self.name = _unique(f"k_{py_func.__qualname__}_{digest}")
        C.RULES[self.name] = self
        store.GLOBALS[self.name] = kernel   # generated modules call it by this name

    def __call__(self, *args: Any) -> Any:
        return C.njit_call(*args, kernel=self.name)

    def shape(self, *avals: Aval) -> Aval:
        if self._shape is None:
            return avals[0]
        shape, dtype = self._shape(*avals)
        return Aval(tuple(shape), np.dtype(dtype))

    def impl(self, *ins: Any) -> np.ndarray:
        aval = self.shape(*(Aval(np.shape(x), np.asarray(x).dtype) for x in ins))
        return np.asarray(self.kernel(*ins), dtype=aval.dtype)

    def vjp(self, ct: Any, out: Any, *ins: Any) -> tuple:
        if self._vjp is None:
            raise ArgumentError(at_source(
                f"njit_primitive {self.__name__} has no VJP: pass vjp=lambda ct, out, *ins: "
                f"(one cotangent per input,)", user_source()))
        cts = self._vjp(ct, out, *ins)
        return tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)


def njit_primitive(kernel: Any = None, *, vjp: Callable[..., Any] | None = None,
                   shape: Callable[..., Any] | None = None) -> Any:
    """Make a Numba `@njit` function `kernel(*arrays) -> array` a differentiable primitive.

    `vjp(ct, out, *ins)` returns one cotangent (or None) per input, written with numpy ops
    (or other primitives); `shape(*avals) -> (shape, dtype)` gives the output's shape and dtype
    from the inputs' (default: those of the first input). Scalar inputs reach the kernel as 0-d
    arrays; a kernel with a 0-d output returns a scalar. Usable as a decorator:
    `@tj.njit_primitive(vjp=...)` above `@numba.njit`.
    """
    if kernel is None:
        return lambda k: NjitPrimitive(k, vjp, shape)
    return NjitPrimitive(kernel, vjp, shape)
