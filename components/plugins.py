"""A catalog of plugins by name, one plugin per module of a package: one face for every catalog, timm-style.

Every module of the package is imported on the first lookup, so adding a
plugin is adding one file with ``@register_<kind>("name")`` — nothing else
changes. Each catalog answers the same calls (``timm.create_model(name, **options)`` / ``timm.list_models()``):
:meth:`Catalog.register` (the decorator), :meth:`Catalog.create` (a plugin made by name, its options checked),
:meth:`Catalog.names` (the registered names, sorted), :meth:`Catalog.check_options` (the options a plugin takes,
checked by name before anything is built) and :meth:`Catalog.get` (the registered object itself); each catalog's
module names them ``register_<kind>``, ``create_<kind>``, ``list_<kinds>``, ``check_<kind>_options``.
Used for alignment methods, heads, bridge maps, datasets, image sources, spaces and gallery stores.
:func:`declared_names` reads the names from the modules' source instead, for a caller that must not import them
(the command line's choices: the plugins import torch).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

__all__ = ["Catalog", "declared_names", "keyword_options"]

T = TypeVar("T")
P = TypeVar("P")


def keyword_options(plugin: Callable[..., Any]) -> list[str]:
    """The options a plugin's constructor takes: its parameters that have a default, in declaration order (the ones
    without a default are its natural arguments, passed by position)."""
    params = inspect.signature(plugin).parameters.values()
    return [p.name for p in params if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _call(plugin: Callable[..., Any], *args: Any, **options: Any) -> Any:
    return plugin(*args, **options)


class Catalog(Generic[T]):
    """The plugins of one kind by name (module docstring).

    Messages are format strings over ``kind``, ``name``, ``fix``, ``names`` (the registered names, a list) and
    ``available`` (them joined by commas); a bad option's also over ``unknown`` (the options not taken, a sorted
    list), ``unknown_each`` (them quoted, joined by commas), ``known`` (the options taken, a list, or ``none``) and
    ``known_each`` (them joined by commas, or ``none``).
    """

    def __init__(
        self,
        kind: str,
        package: str,
        error: type[Exception],
        fix: str,
        *,
        name_attr: str | None = None,
        options: Callable[[T], Sequence[str]] = keyword_options,
        make: Callable[..., Any] = _call,
        unknown: str = "unknown {kind} {name!r}; available: {available} ({fix})",
        bad_options: str = "{kind} {name!r} has no option(s) {unknown}; its options are {known} ({fix})",
    ) -> None:
        """``kind``: what is registered (for messages); ``package``: dotted name of the plugin package; ``error``:
        raised for an unknown name or option; ``fix``: how the user picks a name. ``name_attr``: the attribute of a
        registered class that gets its name (None: none); ``options``: the option names a plugin takes (default: its
        constructor's parameters with a default); ``make``: ``(plugin, *args, **options)`` → the made object (default:
        the plugin called with them); ``unknown`` / ``bad_options``: the messages (class docstring)."""
        self.kind = kind
        self.package = package
        self.error = error
        self.fix = fix
        self.name_attr = name_attr
        self._options = options
        self._make = make
        self._unknown = unknown
        self._bad_options = bad_options
        self._items: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[P], P]:
        """The decorator that registers a plugin under ``name`` (ValueError for a second object under one name)."""

        def deco(obj: P) -> P:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            if self.name_attr is not None:
                setattr(obj, self.name_attr, name)
            self._items[name] = obj  # type: ignore[assignment]
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
        """The registered names, sorted."""
        self._discover()
        return sorted(self._items)

    def _message(self, template: str, name: str, **fields: Any) -> str:
        names = self.names()
        return template.format(
            kind=self.kind, name=name, fix=self.fix, names=names, available=", ".join(names), **fields
        )

    def get(self, name: str) -> T:
        """The plugin registered under ``name`` (``error`` naming the available ones otherwise)."""
        self._discover()
        try:
            return self._items[name]
        except KeyError:
            raise self.error(self._message(self._unknown, name)) from None

    def options(self, name: str) -> list[str]:
        """The option names plugin ``name`` takes."""
        return list(self._options(self.get(name)))

    def check_options(self, name: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``options`` (a copy) when plugin ``name`` takes each of them; ``error`` naming the ones it does not take
        and the ones it does otherwise (their values are the plugin's to check)."""
        given = dict(options or {})
        if not given:  # nothing to check (the name still is: a plugin made without options is a hot path)
            self.get(name)
            return given
        known = self.options(name)
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise self.error(
                self._message(
                    self._bad_options,
                    name,
                    unknown=unknown,
                    unknown_each=", ".join(map(repr, unknown)),
                    known=known or "none",
                    known_each=", ".join(known) or "none",
                )
            )
        return given

    def create(self, name: str, /, *args: Any, **options: Any) -> Any:
        """Plugin ``name`` made from its natural arguments ``args`` and its ``options`` (checked by name first)."""
        return self._make(self.get(name), *args, **self.check_options(name, options))


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
