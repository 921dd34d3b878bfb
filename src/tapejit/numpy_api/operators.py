"""Python's operators on tracers: `x + y`, `x < y`, `-x`, `x += y`, `round(x, 2)`, ... route
through numpy's ufuncs, so their semantics (promotion, broadcasting) are numpy's; in-place
operators update the tracer (and every alias of it) as numpy's do."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ConcretizationError, at_source, user_source
from ..trace import UFUNC_RULES, Tracer, rebind


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "matmul": np.matmul,
    "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
}


def _operator(uf: np.ufunc, reflected: bool) -> Callable[[Tracer, Any], Any]:
    """`x op y` goes straight to the ufunc's lowering rule (skipping numpy's override dispatch,
    same semantics); operands numpy would defer to (other tracers, arrays) take the same path."""
    if reflected:
        return lambda self, other: UFUNC_RULES[uf](other, self)
    return lambda self, other: UFUNC_RULES[uf](self, other)


for _name, _uf in BINARY.items():
    setattr(Tracer, f"__{_name}__", _operator(_uf, False))
    setattr(Tracer, f"__r{_name}__", _operator(_uf, True))
for _name, _uf in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                   "eq": np.equal, "ne": np.not_equal}.items():
    setattr(Tracer, f"__{_name}__", lambda self, other, _uf=_uf: _uf(self, other))
setattr(Tracer, "__neg__", lambda self: np.negative(self))
setattr(Tracer, "__pos__", lambda self: self)
setattr(Tracer, "__abs__", lambda self: np.absolute(self))
setattr(Tracer, "__invert__", lambda self: np.logical_not(self))


def _round(self: Tracer, ndigits: int | None = None) -> Any:
    """round() as on numpy's scalars (a 0-d tracer stands for one): np.round to `ndigits`,
    without them the int it rounds to (int(): a value the program is guarded on)."""
    return int(np.round(self)) if ndigits is None else np.round(self, ndigits)


def _format(self: Tracer, spec: str) -> str:
    """format(): with a spec (f"{loss:.3f}") it needs the number, which a trace does not have."""
    if not spec:
        return repr(self)
    raise ConcretizationError(at_source(
        f"Formatting a traced value (format spec {spec!r}) needs its number ({self.aval}), "
        f"which exists when the program runs, not while tapejit traces it. Return the value "
        f"(has_aux=True for grad/value_and_grad) and format it outside", user_source()))


Tracer.__round__, Tracer.__format__ = _round, _format


def _inplace(uf: np.ufunc) -> Callable[..., Any]:
    """`x op= y` updates x in place (every alias of x sees it, as in numpy), keeping its shape
    and dtype; without this Python would rebind only the name to a new tracer."""
    def op(self: Tracer, other: Any) -> Tracer:
        result = uf(self, other)
        if result.shape == self.shape and result.dtype == self.dtype:
            rebind(self, result)
        else:
            self[...] = result  # broadcasts/casts into x, or raises like numpy
        return self
    return op


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
    setattr(Tracer, f"__i{_name}__", _inplace(BINARY[_name]))
