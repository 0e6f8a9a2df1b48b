"""IndexManifest validation and JSON round trip (docs/design.md §7 "Index files")."""

from __future__ import annotations

import dataclasses
import json

import pytest

from components.errors import IndexIntegrityError
from components.indexing import IndexManifest

_SHA = "ab" * 32


def _manifest(**kw) -> IndexManifest:
    base = dict(generation=3, geometry="lorentz", curvature=1.0, dim=17, count=100, checksum=_SHA)
    base.update(kw)
    return IndexManifest(**base)


def test_round_trip_and_defaults():
    m = _manifest()
    assert m.compatible_generations == (3,)
    assert m.format_version == 1 and m.index_type == "flat_ip"
    assert m.created_at.endswith("+00:00")
    again = IndexManifest.from_json(m.to_json())
    assert again == m
    assert json.loads(m.to_json())["compatible_generations"] == [3]


def test_manifest_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _manifest().generation = 4  # type: ignore[misc]


def test_compatible_generations_must_include_own_generation():
    assert _manifest(compatible_generations=(4, 3, 3)).compatible_generations == (3, 4)
    with pytest.raises(IndexIntegrityError, match="compatible_generations.*own generation 3"):
        _manifest(compatible_generations=(2,))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("geometry", "poincare"),
        ("curvature", -1.0),
        ("curvature", float("nan")),
        ("dim", 1),  # lorentz needs d+1 >= 2
        ("count", 0),
        ("generation", True),
        ("checksum", "xyz"),
        ("index_type", "hnsw"),
        ("created_at", "2025-01-01T00:00:00+02:00"),
        ("created_at", "yesterday"),
        ("format_version", 2),
    ],
)
def test_bad_fields_are_named(field, value):
    with pytest.raises(IndexIntegrityError, match=f"field '{field}'") as e:
        _manifest(**{field: value})
    assert "rebuild the index" in str(e.value)


def test_missing_and_unknown_fields_are_named():
    d = _manifest().to_dict()
    del d["checksum"]
    with pytest.raises(IndexIntegrityError, match="missing field.*checksum"):
        IndexManifest.from_dict(d)
    d = _manifest().to_dict()
    d["shard"] = 1
    with pytest.raises(IndexIntegrityError, match="unknown field.*shard"):
        IndexManifest.from_dict(d)
    with pytest.raises(IndexIntegrityError, match="not valid JSON"):
        IndexManifest.from_json("{truncated")
