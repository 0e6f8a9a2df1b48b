"""Plugin catalogs (components/plugins.py): every catalog answers one face, timm-style — ``register_<kind>``,
``create_<kind>(name, ...)``, ``list_<kinds>()`` and, where plugins take options, ``check_<kind>_options`` — and the
names read from the plugins' source are the names they register."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest

from components.errors import ConfigError, DataError
from components.plugins import Catalog, declared_names


@dataclass(frozen=True)
class Face:
    """One catalog: its module, the catalog there, its kind and plural, and a plugin with an option it takes."""

    module: str
    catalog: str
    kind: str
    kinds: str
    package: str
    error: type[Exception]
    option: tuple[str, str] | None  # (a plugin, an option it takes); None: the catalog's plugins take none


FACES = [
    Face("components.losses.catalog", "ALIGNMENTS", "alignment", "alignments", "components.losses.methods",
         ConfigError, ("hbct", "tau")),
    Face("components.models.head_catalog", "HEADS", "head", "heads", "components.models.heads", ConfigError, None),
    Face("components.bridges.base", "MAPS", "map", "maps", "components.bridges.maps", ConfigError,
         ("low_rank", "rank")),
    Face("components.data.catalog", "DATASETS", "dataset", "datasets", "components.data.sets", DataError,
         ("digits", "download")),
    Face("components.data.sources.catalog", "SOURCES", "source", "sources", "components.data.sources", DataError,
         ("folder", "channels")),
    Face("components.geometry.space", "SPACES", "space", "spaces", "components.geometry.spaces", ConfigError, None),
]  # fmt: skip


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.kind)
def test_every_catalog_answers_the_same_face(face: Face, tmp_path):
    module = importlib.import_module(face.module)
    catalog = getattr(module, face.catalog)
    assert isinstance(catalog, Catalog) and catalog.package == face.package and catalog.error is face.error
    # the named functions are the catalog's own methods: one face, no second path
    register, listed = getattr(module, f"register_{face.kind}"), getattr(module, f"list_{face.kinds}")
    assert register.__self__ is catalog and register.__func__ is Catalog.register
    assert listed.__self__ is catalog and listed.__func__ is Catalog.names
    names = listed()
    assert names and names == sorted(names)
    create = getattr(module, f"create_{face.kind}")  # the catalog's, or a function that checks a path first
    assert getattr(create, "__self__", None) is catalog or create.__module__ == face.module
    with pytest.raises(face.error, match="no_such_plugin"):
        create("no_such_plugin", tmp_path)
    check = getattr(module, f"check_{face.kind}_options", None)
    if face.option is None:
        assert check is None
        return
    assert check.__self__ is catalog and check.__func__ is Catalog.check_options
    plugin, option = face.option
    assert option in catalog.options(plugin)
    assert check(plugin, {option: 1}) == {option: 1}
    with pytest.raises(face.error, match="not_an_option"):
        check(plugin, {"not_an_option": 1})
    with pytest.raises(face.error, match="not_an_option"):  # create checks the options before it makes anything
        create(plugin, tmp_path, not_an_option=1)


@pytest.mark.parametrize("face", [f for f in FACES if f.kind != "dataset"], ids=lambda f: f.kind)
def test_declared_names_are_the_names_the_catalog_registers(face: Face):
    catalog = getattr(importlib.import_module(face.module), face.catalog)
    assert declared_names(face.package, f"register_{face.kind}") == catalog.names()


def test_a_name_that_only_importing_could_tell_is_refused():
    """cifar100.py registers ``@register_dataset(NAME)``: a variable, not a literal."""
    with pytest.raises(TypeError, match=r"cifar100\.py:\d+: @register_dataset\(\.\.\.\) must name its plugin"):
        declared_names("components.data.sets", "register_dataset")
