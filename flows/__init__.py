"""The application: Prefect flows and the steps they chain, one package per lifecycle or concern
(docs/architecture.md), over components/ and registry/.

A package's public face is its ``__init__``: what callers outside it (the CLI, the benchmarks) import. Faces whose
modules are costly to import (Prefect, torch) are resolved on first use (:func:`lazy_face`), so importing one module
of a package does not import the rest of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_face"]


def lazy_face(package: str, face: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` (PEP 562) of a package whose public names are defined in its
    modules: ``face`` maps each name to the module (relative to ``package``) that defines it, imported when the name
    is first used. A name that is also one of the package's module names would be shadowed by that module once it is
    imported: the faces' test refuses it."""

    def __getattr__(name: str) -> object:
        if name not in face:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{face[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(face)

    return __getattr__, __dir__
