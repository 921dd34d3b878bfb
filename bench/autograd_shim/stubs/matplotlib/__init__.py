"""A no-op matplotlib for the autograd examples' plots: every name is a callable that
returns a no-op object (figures, axes, colour maps). `pyplot.imread` really reads PNGs
(png.py): the fluid simulation starts from an image."""
import sys
import types


class NoOp:
    """Any attribute, call, index or iteration: another no-op (iterates as empty)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return NoOp()

    def __call__(self, *args, **kwargs):
        return NoOp()

    def __getitem__(self, key):
        return NoOp()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


def _module(name):
    module = types.ModuleType(name)
    module.__getattr__ = lambda attr: NoOp() if not attr.startswith("__") else _missing(attr)
    sys.modules[name] = module
    return module


def _missing(attr):
    raise AttributeError(attr)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return NoOp()


for _sub in ("image", "cm", "animation", "colors"):
    globals()[_sub] = _module(f"{__name__}.{_sub}")
