"""A catalog of plugins by name, one plugin per module of a package.

Every module of the package is imported on the first lookup, so adding a
plugin is adding one file with ``@catalog.register("name")`` — nothing else
changes. Used for alignment methods, datasets and embedding heads.
:func:`declared_names` reads the names from the modules' source instead, for a caller that must not import them
(the command line's choices: the plugins import torch).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["Catalog", "declared_names"]

T = TypeVar("T")


class Catalog(Generic[T]):
    def __init__(self, kind: str, package: str, error: type[Exception], fix: str) -> None:
        """``kind``: what is registered (for messages); ``package``: dotted name of the plugin
        package; ``error``: raised for unknown names; ``fix``: how the user picks a name."""
        self.kind = kind
        self.package = package
        self.error = error
        self.fix = fix
        self._items: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def _discover(self) -> None:
        if self._discovered:
            return
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{self.package}.{mod.name}")
        self._discovered = True

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._items)

    def get(self, name: str) -> T:
        self._discover()
        try:
            return self._items[name]
        except KeyError:
            raise self.error(
                f"unknown {self.kind} {name!r}; available: {', '.join(self.names())} ({self.fix})"
            ) from None


def declared_names(package: str, decorator: str) -> list[str]:
    """The names the modules of ``package`` (dotted) register with ``@decorator("name")``, sorted: what the
    catalog's :meth:`Catalog.names` returns, read from their source without importing the package or its parents.

    TypeError for a registration whose name is not a string literal (only importing the module would tell it).
    """
    top, *rest = package.split(".")
    spec = importlib.util.find_spec(top)  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise TypeError(f"{top} is not an installed package")
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    names: list[str] = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == decorator):
                    continue
                arg = deco.args[0] if deco.args else None
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise TypeError(
                        f"{path}:{deco.lineno}: @{decorator}(...) must name its plugin with a string literal"
                    )
                names.append(arg.value)
    return sorted(names)
