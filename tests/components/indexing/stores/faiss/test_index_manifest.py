"""IndexManifest validation and JSON round trip (docs/design.md §7 "Index files")."""

from __future__ import annotations

import dataclasses
import json

import pytest

from components.errors import IndexIntegrityError
from components.indexing.stores.faiss import FORMAT_VERSION, IndexManifest
from components.indexing.stores.faiss.manifest import shards_digest

_SHA = "ab" * 32


def _manifest(**kw) -> IndexManifest:
    base = dict(generation=3, geometry="lorentz", curvature=1.0, dim=17, count=100, checksum=_SHA)
    base.update(kw)
    return IndexManifest(**base)


def test_round_trip_and_defaults():
    m = _manifest()
    assert m.compatible_generations == (3,)
    assert m.format_version == FORMAT_VERSION == 2 and m.index_type == "flat" and m.factory == "IDMap2,Flat"
    assert (m.recall_at_10, m.recall_queries, m.build_seconds, m.search_qps) == (1.0, 0, None, None)
    assert (m.metric, m.stored_dim, m.shards) == ("inner_product", 17, 1)
    assert m.created_at.endswith("+00:00")
    again = IndexManifest.from_json(m.to_json())
    assert again == m
    assert json.loads(m.to_json())["compatible_generations"] == [3]


def test_approximate_manifest_round_trip():
    shas = ("cd" * 32, "ef" * 32)
    m = _manifest(
        index_type="ivf",
        factory="IDMap2,IVF64,Flat",
        params={"nlist": 64, "nprobe": 8, "metric": "l2", "stored_dim": 18, "l2_radius": 3.5, "shards": 2},
        recall_at_10=0.97,
        recall_queries=500,
        build_seconds=1.5,
        search_qps=12345.0,
        shard_checksums=shas,
        checksum=shards_digest(shas),
    )
    again = IndexManifest.from_json(m.to_json())
    assert again == m and again.shards == 2 and again.stored_dim == 18 and again.metric == "l2"
    assert json.loads(m.to_json())["shard_checksums"] == list(shas)


def test_version_1_manifest_is_upgraded():
    v1 = {
        "generation": 3, "geometry": "lorentz", "curvature": 1.0, "dim": 17, "count": 100, "checksum": _SHA,
        "index_type": "flat_ip", "compatible_generations": [3, 4], "created_at": "2025-01-01T00:00:00+00:00",
        "format_version": 1,
    }  # fmt: skip
    m = IndexManifest.from_dict(v1)
    assert (m.format_version, m.index_type, m.factory, m.recall_at_10) == (2, "flat", "IDMap2,Flat", 1.0)
    assert m.compatible_generations == (3, 4) and m.checksum == _SHA and m.stored_dim == 17
    with pytest.raises(IndexIntegrityError, match="index_type.*'flat_ip' in a version-1 manifest"):
        IndexManifest.from_dict({**v1, "index_type": "hnsw"})
    with pytest.raises(IndexIntegrityError, match="unknown field.*factory"):
        IndexManifest.from_dict({**v1, "factory": "IDMap2,Flat"})
    v2 = m.to_dict()
    del v2["recall_at_10"]
    with pytest.raises(IndexIntegrityError, match="missing field.*recall_at_10"):
        IndexManifest.from_dict(v2)


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
        ("index_type", "annoy"),
        ("index_type", "flat_ip"),  # only as a version-1 manifest
        ("factory", "Flat"),
        ("params", {"metric": "cosine"}),
        ("params", {"stored_dim": 16}),
        ("params", {"nested": {"a": 1}}),
        ("params", {"shards": 2}),  # but no shard checksums
        ("recall_at_10", 1.5),
        ("recall_at_10", 0.9),  # flat is exact
        ("recall_queries", -1),
        ("build_seconds", float("inf")),
        ("search_qps", 0),
        ("shard_checksums", ("ab" * 32,)),
        ("shard_checksums", ("ab" * 32, "zz")),
        ("created_at", "2025-01-01T00:00:00+02:00"),
        ("created_at", "yesterday"),
        ("format_version", 1),
        ("format_version", 3),
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


@pytest.mark.parametrize(
    ("index_type", "params", "missing"),
    [
        ("ivf", {"nlist": 16}, "nprobe"),
        ("hnsw", {"hnsw_m": 32}, "ef_search"),
        ("ivfpq", {"nlist": 16, "nprobe": 4, "pq_m": 8}, "pq_nbits"),
        ("ivfsq", {"nlist": 16}, "nprobe"),
    ],
)
def test_each_type_must_record_its_parameters(index_type, params, missing):
    with pytest.raises(IndexIntegrityError, match=f"field 'params' must record '{missing}'"):
        _manifest(index_type=index_type, params=params, recall_at_10=0.9)


def test_sharded_checksum_must_be_the_digest_of_the_shards():
    shas = ("cd" * 32, "ef" * 32)
    with pytest.raises(IndexIntegrityError, match="field 'checksum' is not the digest of shard_checksums"):
        _manifest(shard_checksums=shas, params={"shards": 2})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(params={"lorentz_form": "proxy", "time_scale": 0.5, "rerank": 3}), "approximate lorentz indexes only"),
        (dict(index_type="hnsw", params={"hnsw_m": 8, "ef_search": 16, "lorentz_form": "sphere"}), "'proxy' or"),
        (dict(index_type="hnsw", params={"hnsw_m": 8, "ef_search": 16, "lorentz_form": "proxy"}), "'time_scale'"),
        (dict(index_type="hnsw", params={"hnsw_m": 8, "ef_search": 16, "lorentz_form": "mips_l2"}), "'l2_radius'"),
        (
            dict(index_type="hnsw", params={"hnsw_m": 8, "ef_search": 16, "lorentz_form": "proxy", "time_scale": 0.5,
                                            "rerank": 1.5}),
            "'rerank'",
        ),
    ],
)  # fmt: skip
def test_lorentz_form_parameters_are_checked(kw, message):
    with pytest.raises(IndexIntegrityError, match=f"field 'params'.*{message}"):
        _manifest(**{"recall_at_10": 0.9, **kw} if "index_type" in kw else kw)
