"""autograd.misc: `flatten` (flatten.py) and the optimizers (optimizers.py)."""
from .flatten import flatten
