"""autograd.scipy: scipy's stats, special and linalg modules; `signal` and `integrate` are
autograd's own functions (signal.py, integrate.py)."""
import sys

import scipy.linalg
import scipy.special
import scipy.stats

stats, special, linalg = scipy.stats, scipy.special, scipy.linalg
for _name in ("stats", "special", "linalg"):
    sys.modules[f"{__name__}.{_name}"] = getattr(scipy, _name)
for _name in ("norm", "multivariate_normal", "t", "gamma", "beta", "poisson", "dirichlet"):
    sys.modules[f"{__name__}.stats.{_name}"] = getattr(scipy.stats, _name)
