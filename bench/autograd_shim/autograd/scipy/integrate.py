"""autograd.scipy.integrate.odeint: scipy's odeint on concrete values; inside a traced
function (tapejit's grad, jit, ...) tapejit's `odeint`, with gradients by the adjoint method."""
import functools

import scipy.integrate

from tapejit import integrate as _integrate

odeint = functools.partial(_integrate.scipy_odeint,
                           getattr(scipy.integrate.odeint, "__wrapped__", scipy.integrate.odeint))
