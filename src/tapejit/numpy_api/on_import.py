"""Code run once a module is imported, before or after tapejit: the rules for scipy's modules,
which `import tapejit` does not import (scipy.special alone took a third of its import).

    on_import("scipy.special", install)   # install(module) now, or right after its import

`install` runs right after the module's own code, before the `import` statement that loaded
it returns, so `from scipy.special import logsumexp` gets what `install` put there. A finder
first on `sys.meta_path` (`_Finder`) finds the module as Python would and wraps its loader.
"""
from __future__ import annotations

import importlib.machinery
import sys
from types import ModuleType
from typing import Any, Callable

_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}


def on_import(name: str, install: Callable[[ModuleType], None]) -> None:
    """`install(module)` for the module `name`: now where it is imported, else once it is."""
    module = sys.modules.get(name)
    if module is not None:
        install(module)
        return
    _waiting.setdefault(name, []).append(install)
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder:
    """Finds a module `on_import` waits for as Python would, and runs what waits once its
    module ran (a meta path finder: importlib.abc's base class would cost 10 ms of import)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _waiting:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            for install in _waiting.pop(name, []):
                install(module)
        loader.exec_module = exec_module    # type: ignore[method-assign]
        return spec
