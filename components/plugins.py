"""A catalog of plugins by name, one plugin per module of a package.

Every module of the package is imported on the first lookup, so adding a
plugin is adding one file with ``@catalog.register("name")`` — nothing else
changes. Used for alignment methods, datasets and embedding heads.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Catalog"]

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
