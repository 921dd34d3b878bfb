"""autograd.scipy.integrate.odeint is scipy's odeint (tapejit has no ODE solver to trace)."""
from scipy.integrate import odeint  # noqa: F401
