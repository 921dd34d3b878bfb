"""What an example computed last, for the runner's comparison: the value of the objective at
the last gradient evaluation (`grad`, `value_and_grad`; for `elementwise_grad`, the norm of
the derivatives), recorded the same way under HIPS autograd and under tapejit (the runner
reads `LAST` when the example returns)."""
import numpy as np

LAST: dict = {"objective": None, "grad_calls": 0}
TRANSFORMS: list = []      # tapejit's transformed functions (cache_info), shim mode only


def note(value):
    """Keep `value` (an objective; of an array, its norm) as the latest one; a value
    of a call inside another differentiation (a tracer, autograd's box) is not kept."""
    if isinstance(value, (np.ndarray, np.generic, float, int)):
        array = np.asarray(value, dtype=float)
        LAST["objective"] = float(np.sum(array) if array.size == 1 else np.linalg.norm(array))
        LAST["grad_calls"] += 1
    return value


def wrap_autograd(autograd):
    """Make HIPS autograd's `grad` record the objective it differentiates (autograd computes
    it anyway: `value_and_grad` is the same sweep)."""
    value_and_grad = autograd.value_and_grad

    def grad(fun, argnum=0):
        vg = value_and_grad(fun, argnum)

        def gradient(*args, **kwargs):
            value, g = vg(*args, **kwargs)
            note(value)
            return g
        return gradient

    def recording_value_and_grad(fun, argnum=0):
        vg = value_and_grad(fun, argnum)

        def both(*args, **kwargs):
            value, g = vg(*args, **kwargs)
            note(value)
            return value, g
        return both

    elementwise_grad = autograd.elementwise_grad
    autograd.grad = grad
    autograd.value_and_grad = recording_value_and_grad
    autograd.elementwise_grad = lambda fun, argnum=0: _noting(elementwise_grad(fun, argnum))


def _noting(fn):
    """`fn`, its outputs recorded (for elementwise_grad: the sum of the derivatives)."""
    return lambda *args, **kwargs: note(fn(*args, **kwargs))
