"""No-op pyplot (see matplotlib/__init__.py), with a real `imread` for PNG files."""
from matplotlib import NoOp
from matplotlib.png import imread  # noqa: F401


def subplots(*args, nrows=1, ncols=1, **kwargs):
    n = (args[0] * args[1]) if len(args) >= 2 else (args[0] if args else nrows * ncols)
    return NoOp(), NoOp() if n == 1 else [NoOp() for _ in range(n)]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return NoOp()
