"""The flows' public faces (flows/__init__.py ``lazy_face``): every name resolves to what its module defines, none is
shadowed by a module of its package, and importing a package does not import its costly modules."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import flows
from tests.conftest import REPO

PACKAGES = sorted(m.name for m in pkgutil.iter_modules(flows.__path__, "flows.") if m.ispkg)
FACED = [p for p in PACKAGES if "_FACE" in vars(importlib.import_module(p))]


def test_the_packages_the_benchmarks_use_have_faces():
    assert {"flows.backfill", "flows.gallery", "flows.lifecycle", "flows.params", "flows.planning"} <= set(FACED)
    assert {"flows.runtime", "flows.upgrade"} <= set(FACED)


@pytest.mark.parametrize("package", FACED)
def test_every_name_of_a_face_is_its_modules_own_and_no_module_shadows_it(package):
    pkg = importlib.import_module(package)
    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    for name, module in pkg._FACE.items():
        assert name not in modules, f"{package}.{name} is also a module: importing it would shadow the face's name"
        assert getattr(pkg, name) is getattr(importlib.import_module(f"{package}.{module}"), name)
        assert name in pkg.__all__ and name in dir(pkg)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        pkg.nothing_here  # noqa: B018


def test_importing_a_face_imports_none_of_its_modules():
    """``import flows.backfill`` costs nothing until a name is used: its flow imports Prefect (seconds)."""
    code = (
        "import sys, flows.backfill, flows.gallery, flows.lifecycle, flows.runtime, flows.upgrade\n"
        "print(sorted(m for m in ('prefect', 'torch', 'flows.backfill.flow', 'flows.gallery.pipeline') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
