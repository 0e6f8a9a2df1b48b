"""Rollback (flows/backfill/rollback.py) on the faiss store, through the real flows: g0 embeds the gallery
(version 0), g1 (not compatible with it) follows, a full backfill with g1 publishes version 1 and makes g1
production; the live gallery is pointed back and forth, gated by the production generation's queries (``promote``
names a new one), each move one lineage transaction that live/CURRENT, the MLflow aliases and doctor follow. Every
refusal is one line and changes nothing. The database stores' rollbacks: tests/flows/backfill/test_gallery_stores.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.errors import ConfigError, IndexIntegrityError
from components.indexing.live import LivePointer
from flows.backfill.rollback import rollback
from flows.generation.commit import PRODUCTION_ALIAS
from flows.params import load_params
from flows.recovery.reconcile import inspect_workspace
from flows.runtime.workspace import Workspace
from tests.helpers import copy_workspace, run_backfill, run_generation, write_params
from tests.store_reads import store_reads

G0_GALLERY = Path("generations") / "gen_000" / "index"
V1 = Path("live") / "index-v001" / "index"


@pytest.fixture(scope="module")
def backfilled(g0_template, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): g0 live (version 0), g1 not compatible with it, a full backfill with g1 (version 1)."""
    home, params = copy_workspace(g0_template, tmp_path_factory.mktemp("rollback"))
    with pytest.raises(ConfigError) as err:  # one version so far
        rollback(load_params(params), Workspace(home), by="t")
    assert str(err.value) == "the live gallery (version 0) has no earlier version to roll back to"
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    run_backfill(home, params, target=1, fraction=1.0)
    return home, params


def _state(home: Path, params: Path) -> tuple[int, str, int | None, dict[int, str]]:
    """(pointer rows, the live index, production, each generation's status): what a refusal must leave as it was."""
    with Workspace(home).lineage(load_params(params), readonly=True) as store:
        rows = store.live_pointers()
        status = {g.id: g.status for g in store.generations()}
        return len(rows), rows[-1].index_path, store.production_generation_id(), status


def _live_index(home: Path) -> Path:
    return Path(LivePointer(Workspace(home).live_dir).pointer()["index"])


def _to(home: Path, params: Path, k: int, promote: int) -> None:
    """Make version ``k`` live (with ``promote`` production) unless it is."""
    if _live_index(home) != home / (G0_GALLERY if k == 0 else V1):
        rollback(load_params(params), Workspace(home), to=k, promote=promote, by="t")


def test_a_rollback_past_a_full_backfill_promotes_a_generation_the_old_gallery_accepts_and_everything_follows(
    backfilled,
):
    home, params = backfilled
    p, ws = load_params(params), Workspace(home)
    assert _live_index(home) == home / V1
    before = _state(home, params)
    assert before[2:] == (1, {0: "retired", 1: "serving"})  # the full backfill made g1 production and retired g0
    with pytest.raises(ConfigError) as err:  # the gate: version 0 accepts g0's queries only
        rollback(p, ws, by="alice")
    assert str(err.value) == (
        "gallery version 0 does not accept queries of production generation 1 (it accepts generations [0]); pass "
        "--promote with one of them to make it production with the rollback"
    )
    with pytest.raises(ConfigError) as err:
        rollback(p, ws, promote=1, by="alice")
    assert str(err.value) == (
        "gallery version 0 does not accept queries of generation 1 (it accepts generations [0]); --promote one of them"
    )
    assert _state(home, params) == before
    done = rollback(p, ws, promote=0, by="alice", reason="recall dropped")
    assert (done.previous, done.version, done.generation, done.compatible_generations) == (1, 0, 0, [0])
    assert done.checked == "by its seal"  # sealed at generation 0's commit, pinned on its pointer row
    assert 0 < done.switch_seconds < done.seconds  # the switch is the part after the gate's checks
    assert _live_index(home) == home / G0_GALLERY
    assert _state(home, params)[1:] == (str(home / G0_GALLERY), 0, {0: "serving", 1: "serving"})
    with ws.lineage(p, readonly=True) as store:
        assert store.live_pointer().reason == "rollback to gallery version 0 by alice: recall dropped"
        assert store.live_pointer().id == done.pointer_id
        assert store.generation(0).mlflow_version == ws.tracking(p).alias_version(PRODUCTION_ALIAS)
    assert inspect_workspace(ws, p) == []
    # and forward again: the default is the version live before this one
    again = rollback(p, ws, promote=1, by="alice")
    assert (again.previous, again.version, again.compatible_generations) == (0, 1, [1])
    assert again.checked == "by its seal"  # sealed by the backfill's publish step
    assert _live_index(home) == home / V1 and inspect_workspace(ws, p) == []


def test_a_rollback_reads_no_row_of_the_version_it_restores_and_a_file_touched_since_its_seal_is_verified_in_full(
    backfilled,
):
    """The gate checks what the version's publish step sealed — the seal against the lineage's pin, each file's size
    and modification time, the manifests' sha256 — so no part and no FAISS index file is opened, whatever the
    gallery's size. A part store whose entries changed (a part removed and put back by a rename: the same bytes) is
    not what was sealed: that rollback verifies the version in full (every part's sha256, the index file read), says
    so, and restores it."""
    home, params = backfilled
    p, ws = load_params(params), Workspace(home)
    _to(home, params, 1, 1)
    with store_reads() as reads:
        back = rollback(p, ws, to=0, promote=0, by="t")
    assert back.checked == "by its seal" and reads.rows_read() == []
    assert {f.name for f in reads.opened if home / "generations" in f.parents} <= {"seal.json", "manifest.json",
                                                                                   "serving.json"}  # fmt: skip
    part = sorted((home / V1).parent.glob("gallery/parts/part-*.npz"))[0]
    folder, st = part.parent, part.parent.stat()
    part.rename(folder / ".moved")  # the same bytes, moved out and back
    (folder / ".moved").rename(part)
    with store_reads() as reads:
        forward = rollback(p, ws, to=1, promote=1, by="t")
    assert forward.checked.startswith(f"in full: {folder} holds other files than when the version was sealed")
    assert f"opened {part}" in reads.rows_read() and any(r.startswith("faiss.read_index") for r in reads.rows_read())
    assert _live_index(home) == home / V1 and inspect_workspace(ws, p) == []
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns))  # the module's workspace as it was


def test_the_command_prints_its_seconds_and_how_it_checked_the_version_as_the_scale_bench_reads_them(backfilled):
    from typer.testing import CliRunner

    from bctflow.cli import app
    from benchmarks.scale import rollback_said

    home, params = backfilled
    _to(home, params, 1, 1)
    for version in (0, 1):
        args = ["--home", str(home), "--params", str(params), "--to", str(version), "--promote", str(version)]
        res = CliRunner().invoke(app, ["rollback", *args, "--by", "t"])
        assert res.exit_code == 0, res.output
        seconds, switch, checked = rollback_said(res.output)
        assert 0 < switch <= seconds and checked == "by its seal"  # printed to 2 decimals: equal when all switch
        assert f"generation {version} is production" in " ".join(res.output.split())


def test_a_version_never_live_or_the_live_one_is_refused_in_one_line_and_nothing_changes(backfilled):
    home, params = backfilled
    p, ws = load_params(params), Workspace(home)
    _to(home, params, 1, 1)
    before = _state(home, params)
    with pytest.raises(ConfigError) as err:
        rollback(p, ws, to=1, by="t")
    assert str(err.value) == "gallery version 1 is already live; roll back to one of: 0"
    with pytest.raises(ConfigError) as err:
        rollback(p, ws, to=7, by="t")
    assert str(err.value) == "gallery version 7 was never live in this lineage; roll back to one of: 0"
    assert _state(home, params) == before


def test_a_version_whose_index_changed_since_it_was_live_is_refused_until_restored(backfilled):
    home, params = backfilled
    p, ws = load_params(params), Workspace(home)
    _to(home, params, 0, 0)
    manifest = home / V1 / "manifest.json"
    kept = manifest.read_bytes()
    manifest.write_bytes(kept.replace(b'"count"', b'"count" ', 1))  # still valid JSON, not the pinned file
    before = _state(home, params)
    with pytest.raises(IndexIntegrityError) as err:
        rollback(p, ws, to=1, promote=1, by="t")
    assert str(err.value) == (
        f"gallery version 1's index changed since it was live ({home / V1} does not match the lineage's sha256); "
        "restore the folder from a backup or roll back to another version"
    )
    assert _state(home, params) == before
    manifest.write_bytes(kept)
    part = sorted((home / V1).parent.glob("gallery/parts/part-*.npz"))[0]
    whole = part.read_bytes()
    part.write_bytes(whole[:-7])  # the vectors under the index are not the ones its store pinned
    with pytest.raises(IndexIntegrityError) as err:
        rollback(p, ws, to=1, promote=1, by="t")
    assert str(err.value).startswith(f"gallery version 1 cannot serve again: gallery part {part}")
    assert "\n" not in str(err.value) and _state(home, params) == before
    part.write_bytes(whole)
    assert rollback(p, ws, to=1, promote=1, by="t").version == 1


def test_a_version_retention_removed_is_refused_and_generation_0s_gallery_is_always_kept(backfilled):
    home, params = backfilled
    ws = Workspace(home)
    _to(home, params, 1, 1)
    kept = home.parent / "keep1.yaml"
    write_params(kept, ["gallery.keep_versions=1"])
    run_backfill(home, kept, target=1, fraction=1.0)  # version 2; retention removes version 1
    assert not (home / V1).parent.exists()
    before = _state(home, kept)
    for to in (None, 1):
        with pytest.raises(ConfigError) as err:
            rollback(load_params(kept), ws, to=to, by="t")
        assert str(err.value).startswith("gallery version 1 is no longer retained (retention removed ")
        assert str(err.value).endswith("params gallery.keep_versions sets how many are kept); roll back to one of: 0")
    assert _state(home, kept) == before
    assert rollback(load_params(kept), ws, to=0, promote=0, by="t").previous == 2


def test_there_is_nothing_to_roll_back_without_a_live_gallery_or_an_earlier_version(prefect_harness, tmp_path):
    params = tmp_path / "params.yaml"
    write_params(params)
    with pytest.raises(ConfigError, match=r"^there is no live gallery to roll back; create generation 0 first"):
        rollback(load_params(params), Workspace(tmp_path / "ws"), by="t")
