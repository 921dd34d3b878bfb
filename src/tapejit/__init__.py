"""tapejit: reverse-mode automatic differentiation of plain numpy code, compiled.

    import numpy as np, tapejit as tj

    @tj.grad
    def loss(w, x, y):
        return np.mean((np.tanh(x @ w) - y) ** 2)
"""
from .garbage import collection_paused as _collection_paused

with _collection_paused():      # many objects made, none garbage: 4 ms less (garbage.py)
    from . import numpy_api as _numpy_api  # noqa: F401  (registers the numpy lowering rules)
    from .numpy_api.sorting import unique
    from .numpy_api.checks import check
    from .checkify import checkify
    from .passes.checkify import (ALL_CHECKS as all_checks, NAN_CHECKS as nan_checks,
                                  USER_CHECKS as user_checks, Error)
    from .api import grad, jit, make_tape, value_and_grad
    from .control import checkpoint, cond, fori_loop, scan, switch, where, while_loop
    from .custom import custom_vjp, njit_primitive, stop_gradient
    from .integrate import odeint
    from .jacobians import hessian, jacfwd, jacobian, jacrev, jvp, jvp_cache_info
    from .split import linearize, vjp
    from .vmap import vmap
    from .transforms.cached import clear_cache
    from .threads import get_num_threads, set_num_threads
    from .explain import explain
    from .errors import CheckError, UncheckedError
    from .errors import (ArgumentError, CompiledMismatchError, ConcretizationError, DtypeError,
                         IndexOutOfBoundsError, IRError, RandomnessError, ShapeError, TapejitError,
                         TapejitWarning, UnsupportedOperationError)
    from .errors import (IndexingError, IntegerOverflowError, LeakedTracerError, LinAlgError,
                         NotCallableError, OutOfMemoryError, UnsupportedAttributeError)
    from .ir import Tape, print_tape
    from .typecheck import typecheck
    from .pytree import tree_map
    from . import random

__version__ = "0.1.0"


# name -> (module, attribute): imported on first use (together 5 ms that a script without
# them never pays). A name of a module of its own (tj.explain, tj.checkify) is imported at
# once: importing that module would set the package's attribute to it.
_LATER = {
    "GradientTape": (".gradient_tape", "GradientTape"),
    "TapeError": (".gradient_tape", "TapeError"),
    "tape_cache_info": (".tape_sweeps", "tape_cache_info"),
    "Variable": (".variables", "Variable"), "Explanation": (".program_text", "Explanation"),
    "parse_tape": (".parse", "parse_tape"), "optimizers": (".optimizers", None),
}


def __getattr__(name: str) -> object:
    """The names of `_LATER`, imported on first use (`tj.optimizers` is the module)."""
    if name not in _LATER:
        raise AttributeError(f"module 'tapejit' has no attribute {name!r}")
    import importlib
    module, attribute = _LATER[name]
    found = importlib.import_module(module, __name__)
    value = found if attribute is None else getattr(found, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LATER))


__all__ = [
    "grad", "value_and_grad", "jit", "vjp", "make_tape", "clear_cache", "Tape", "typecheck",
    "parse_tape", "print_tape", "tree_map", "TapejitError", "TapejitWarning",
    "UnsupportedOperationError", "RandomnessError",
    "ConcretizationError", "ShapeError", "DtypeError", "ArgumentError", "IRError",
    "CompiledMismatchError", "IndexOutOfBoundsError", "OutOfMemoryError",
    "IndexingError", "IntegerOverflowError", "LeakedTracerError", "LinAlgError",
    "NotCallableError",
    "UnsupportedAttributeError",
    "explain", "Explanation", "optimizers", "random", "vmap",
    "where", "cond", "switch", "fori_loop", "scan", "while_loop", "checkpoint",
    "set_num_threads", "get_num_threads",
    "jacobian", "jacrev", "jacfwd", "hessian", "jvp", "linearize", "jvp_cache_info",
    "custom_vjp", "stop_gradient", "odeint",
    "njit_primitive", "GradientTape", "Variable", "TapeError", "tape_cache_info", "unique",
    "check", "checkify", "CheckError", "UncheckedError", "Error", "user_checks", "nan_checks",
    "all_checks",
]
