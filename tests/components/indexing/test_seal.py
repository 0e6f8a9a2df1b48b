"""A gallery version's seal (components/indexing/seal.py) on real FAISS files: what its publish step records once —
the served files' and part folders' sizes and modification times, the manifests' sha256, the serving vectors' facts —
and what a switch's check then sees without reading a row, and what only the full verify sees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from components.errors import IndexIntegrityError
from components.indexing.backend import IndexOptions, collection_at, gallery_facts, vector_store
from components.indexing.seal import SEAL, read_seal, seal_version, unsealed
from components.indexing.version import GalleryVersion
from tests.components.indexing.test_backend import stamped_store
from tests.store_reads import store_reads


def _version(root: Path) -> GalleryVersion:
    """A version folder as a publish step leaves it: an evaluation gallery (stamps 0, 1) and a serving corpus
    (stamps 1), each a part store and a FAISS index, the corpus recorded as serving."""
    version = GalleryVersion(root)
    for corpus, stamps in ((False, (0, 1)), (True, (1,))):
        parts = stamped_store(version.store(corpus), n=300 if corpus else 120, geometry="euclidean", stamps=stamps)
        options = IndexOptions({"type": "flat"}, recall_queries=50)
        vector_store("faiss").collection(None, version.index(corpus)).build(parts, generation=1, options=options)
    version.record_serving("corpus")
    return version


@pytest.fixture
def sealed(tmp_path) -> tuple[GalleryVersion, str]:
    version = _version(tmp_path / "index-v001")
    seal, sha = seal_version(version)
    assert (version.root / SEAL).is_file() and read_seal(version) == (seal, sha)
    return version, sha


def test_a_seal_records_every_served_file_the_manifests_and_the_serving_vectors_facts(sealed):
    version, _ = sealed
    seal, _ = read_seal(version)
    assert set(seal.files) == {
        *(f"{folder}/{name}" for folder in ("index", "corpus/index") for name in ("index.faiss", "manifest.json")),
        *(f"{store}/store.json" for store in ("gallery", "corpus/gallery")),
        "gallery/parts",  # each part store's parts as one folder, however many
        "corpus/gallery/parts",
        "serving.json",
    }
    st = (version.corpus_index / "index.faiss").stat()
    assert seal.files["corpus/index/index.faiss"] == (st.st_size, st.st_mtime_ns)
    assert set(seal.manifests) == {"index", "corpus/index"}
    assert seal.facts == gallery_facts(version.corpus_index)  # counted once, here: {1: 300}
    assert seal.facts.rows_by_generation == {1: 300}


def test_an_unchanged_version_is_shown_so_without_opening_a_part_or_an_index_file(sealed):
    version, sha = sealed
    (version.root / "gallery" / ".store.json.0f3a.tmp").write_text("a killed write's leftover")  # not the version's
    with store_reads() as reads:
        assert unsealed(version, sha) is None
    assert reads.rows_read() == [] and version.root / SEAL in reads.opened
    with store_reads() as reads:  # the spy sees the reads the full verify makes
        collection_at(version.corpus_index).verify()
    assert any(r.startswith("faiss.read_index") for r in reads.rows_read())
    assert any(r.endswith(".npz") for r in reads.rows_read())


def test_a_seal_not_pinned_or_not_the_pinned_file_proves_nothing(sealed):
    version, sha = sealed
    assert unsealed(version, None) == "the lineage pinned no seal of it (it went live before bctflow sealed versions)"
    assert unsealed(version, "0" * 64) == f"{version.root / SEAL} is not the seal the lineage pinned"
    seal = version.root / SEAL
    seal.write_bytes(seal.read_bytes().replace(b'"format"', b'"format" ', 1))  # a seal edited by hand
    assert unsealed(version, sha) == f"{seal} is not the seal the lineage pinned"
    seal.unlink()
    assert unsealed(version, sha) == f"its seal {seal} is missing"


def test_a_file_touched_resized_or_removed_or_a_part_added_removed_or_replaced_since_the_seal_is_named(sealed):
    version, sha = sealed
    store = version.root / "corpus" / "gallery" / "store.json"
    st = store.stat()
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000))
    why = unsealed(version, sha)
    assert why.startswith(f"{store} changed since the version was sealed ({st.st_size} bytes modified ")
    assert f", now {st.st_size} bytes modified " in why and why.count(" modified ") == 2  # the same size, touched
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert unsealed(version, sha) is None  # the same bytes at the sealed time: as sealed
    folder = version.root / "corpus" / "gallery" / "parts"
    part = sorted(folder.iterdir())[1]
    kept, was = part.read_bytes(), folder.stat()
    part.unlink()  # removed, then put back by a copy (a rename into the folder): the folder's entries changed
    (folder / ".part.tmp").write_bytes(kept)
    (folder / ".part.tmp").rename(part)
    assert unsealed(version, sha).startswith(f"{folder} holds other files than when the version was sealed")
    os.utime(folder, ns=(was.st_atime_ns, was.st_mtime_ns))
    assert unsealed(version, sha) is None
    index = version.evaluation_index / "index.faiss"
    kept = index.read_bytes()
    index.write_bytes(kept + b"\0")
    assert unsealed(version, sha).startswith(f"{index} changed since the version was sealed ({len(kept)} bytes ")
    index.unlink()
    assert unsealed(version, sha) == f"{index} is missing"


def test_a_manifest_rewritten_in_place_with_its_size_and_time_kept_is_seen_by_its_sha256(sealed):
    version, sha = sealed
    manifest = version.corpus_index / "manifest.json"
    st, body = manifest.stat(), json.loads(manifest.read_text())
    body["recall_at_10"] = 0.5 if body["recall_at_10"] != 0.5 else 0.25
    text = json.dumps(body)
    manifest.write_text(text + " " * (st.st_size - len(text)))  # the same size
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert unsealed(version, sha) == f"{manifest} is not the manifest the version was sealed with"


def test_a_part_rewritten_in_place_is_for_the_full_verify(sealed):
    """What the seal cannot see without listing or reading the parts — one rewritten in place, its folder's entries
    unchanged — the full verify sees: the part against the sha256 its store lists (doctor, the service's load, the
    rollback's fallback)."""
    version, sha = sealed
    part = sorted((version.root / "corpus" / "gallery" / "parts").iterdir())[0]
    raw = bytearray(part.read_bytes())
    raw[-30] ^= 0xFF
    with part.open("r+b") as f:
        f.write(bytes(raw))
    assert unsealed(version, sha) is None
    with pytest.raises(IndexIntegrityError, match=f"gallery part {part} is not the file .* lists"):
        collection_at(version.corpus_index).verify()


def test_a_seal_missing_or_damaged_when_the_switch_reads_its_facts_is_one_line(sealed):
    version, _ = sealed
    (version.root / SEAL).write_text('{"format": 1, "files": {}}')
    with pytest.raises(IndexIntegrityError) as err:
        read_seal(version)
    assert str(err.value) == (
        f"{version.root / SEAL} cannot be read (KeyError); run the same backfill again: it verifies the published "
        "version and seals it anew"
    )
