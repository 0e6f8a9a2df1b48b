"""What planning reads of the past (flows/planning/past.py): the evaluation galleries the new generation is measured
on are the ones the lineage pinned (lineage revision 0006: the sha256 of each gallery's ``store.json``, which lists
every part's sha256), verified before anything trains; lineages written before the pin keep working."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from components.errors import IndexIntegrityError
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.params import GenerationSpec, load_params
from flows.planning import make_plan
from flows.runtime.workspace import Workspace
from tests.helpers import copy_workspace


@pytest.fixture(scope="module")
def g0(g0_template, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file) of a workspace holding generation 0, made by the real flow; tests plan in copies."""
    return copy_workspace(g0_template, tmp_path_factory.mktemp("past"))


def _copy(g0: tuple[Path, Path], tmp_path: Path) -> Path:
    home = tmp_path / "ws"
    shutil.copytree(g0[0], home)
    return home


def _plan(home: Path, params: Path):
    return make_plan(load_params(params), home, GenerationSpec(name="g1", alignment="hbct", reference=False))


def _files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


def _refused(home: Path, params: Path, words: list[str]) -> str:
    before = _files(home)
    with pytest.raises(IndexIntegrityError) as info:
        _plan(home, params)
    msg = str(info.value)
    assert all(w in msg for w in words), msg
    assert "\n" not in msg and "allow_pickle" not in msg and "pickle.load" not in msg, msg
    assert _files(home) == before  # refused before anything is written
    return msg


def _store(home: Path) -> GalleryParts:
    return GalleryParts(GalleryVersion(Workspace(home).generation_dir(0)).evaluation_gallery())


def test_the_commit_pins_the_evaluation_gallery_on_the_generation_and_the_live_pointer(g0):
    home, params = g0
    with Workspace(home).lineage(load_params(params), readonly=True) as store:
        pinned = store.generation(0).gallery_sha256, store.live_pointer().gallery_sha256
    assert pinned == (_store(home).digest(), _store(home).digest())
    _plan(home, params)  # the gallery as committed passes


def test_a_garbage_part_of_the_parent_gallery_is_refused_while_planning(g0, tmp_path):
    home = _copy(g0, tmp_path)
    part = _store(home).part_paths()[0]
    part.write_bytes(b"this is no gallery" * 100)
    _refused(home, g0[1], [f"gallery part {part} is not the file", "restore"])


def test_a_replaced_store_json_is_not_the_gallery_the_lineage_pinned(g0, tmp_path):
    home = _copy(g0, tmp_path)
    meta = _store(home).path / "store.json"
    meta.write_text(meta.read_text().replace("\n", " "))  # the same parts, another file
    _refused(home, g0[1], [f"{meta} is not the one the lineage pinned for generation 0", "restore"])


def test_a_lineage_written_before_the_pin_keeps_working_and_still_checks_the_parts(g0, tmp_path):
    home = _copy(g0, tmp_path)
    con = sqlite3.connect(home / "lineage.db")
    con.execute("UPDATE generations SET gallery_sha256 = NULL")
    con.execute("UPDATE gallery_pointers SET gallery_sha256 = NULL")
    con.commit()
    con.close()
    assert _plan(home, g0[1]).parent.id == 0
    part = _store(home).part_paths()[-1]
    part.write_bytes(b"this is no gallery" * 100)
    _refused(home, g0[1], [f"gallery part {part}"])
