"""A gallery version folder (components/indexing/version.py): where the evaluation gallery and the serving corpus
live, which index serves as recorded, and how a version written before the record (or before part stores) reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.errors import IndexIntegrityError
from components.indexing.version import SERVING_FILE, GalleryVersion
from tests.components.indexing.test_live_and_mixed import build, lorentz_gallery


def _version(tmp: Path) -> GalleryVersion:
    v = GalleryVersion(tmp / "index-v001")
    build(v.root, lorentz_gallery(0), 0).rename(v.evaluation_index)
    return v


def test_the_layout_names_the_evaluation_gallery_and_the_serving_corpus_apart(tmp_path: Path):
    v = GalleryVersion.of_index(tmp_path / "gen_000" / "index")
    assert v.root == tmp_path / "gen_000"
    assert (v.evaluation_store, v.evaluation_index) == (v.root / "gallery", v.root / "index")
    assert (v.corpus_store, v.corpus_index) == (v.root / "corpus" / "gallery", v.root / "corpus" / "index")
    assert (v.store(True), v.index(True), v.store(False), v.index(False)) == (
        v.corpus_store,
        v.corpus_index,
        v.evaluation_store,
        v.evaluation_index,
    )


def test_a_recorded_version_serves_what_it_recorded_whatever_folders_it_holds(tmp_path: Path):
    v = _version(tmp_path)
    build(v.root / "corpus", lorentz_gallery(1), 0).rename(v.corpus_index)
    served = v.record_serving("eval_split")  # a corpus folder beside it does not make it serve the corpus
    assert (served.source, served.index, served.gallery, served.corpus) == (
        "eval_split",
        v.evaluation_index,
        v.evaluation_store,
        False,
    )
    assert json.loads((v.root / SERVING_FILE).read_text()) == {
        "source": "eval_split",
        "gallery": "gallery",
        "index": "index",
    }
    assert v.serving() == served and GalleryVersion.serving_index_of(v.evaluation_index) == v.evaluation_index
    corpus = v.record_serving("webdataset")
    assert corpus.corpus and v.serving().index == v.corpus_index and v.serving().gallery == v.corpus_store
    assert GalleryVersion.serving_index_of(v.evaluation_index) == v.corpus_index


def test_recording_an_index_that_does_not_exist_is_refused(tmp_path: Path):
    v = _version(tmp_path)
    with pytest.raises(IndexIntegrityError, match="corpus/index is missing: build the index before recording"):
        v.record_serving("folder")
    assert not (v.root / SERVING_FILE).exists()


def test_a_version_written_before_the_record_served_its_corpus_when_it_held_one(tmp_path: Path):
    v = _version(tmp_path)
    assert not v.serving().corpus and v.serving().index == v.evaluation_index
    build(v.root / "corpus", lorentz_gallery(1), 0).rename(v.corpus_index)
    assert v.serving().corpus and GalleryVersion.serving_index_of(v.evaluation_index) == v.corpus_index
    (v.root / SERVING_FILE).write_text("{not json")
    with pytest.raises(IndexIntegrityError, match=r"serving.json is damaged .*restore the gallery version"):
        v.serving()


def test_the_evaluation_gallery_of_a_version_written_before_part_stores_is_its_gallery_npz(tmp_path: Path):
    v = GalleryVersion(tmp_path / "gen_000")
    assert v.evaluation_gallery() == v.evaluation_store  # nothing yet: where it will be written
    lorentz_gallery(0).save(v.root / "gallery.npz")
    assert v.evaluation_gallery() == v.root / "gallery.npz"
    (v.evaluation_store / "parts").mkdir(parents=True)
    assert v.evaluation_gallery() == v.evaluation_store  # a part store wins
