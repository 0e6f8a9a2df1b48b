"""Planning (flows/planning/make.py): bad input is refused before any training starts, with one clear error,
and nothing is written."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bctflow.cli import app
from components.errors import CheckpointMismatchError, ConfigError, DataError, IndexIntegrityError, LineageError
from components.indexing.live import LivePointer
from components.indexing.stores.faiss import MANIFEST_FILE
from components.io import file_sha256
from components.models import build_model, save_model
from components.models.checkpoint import save_torch_atomic
from flows.params import GenerationSpec, apply_overrides, load_params
from flows.planning import GenerationPlan, make_plan
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.records import GenerationBundle, PointerRecord, ZetaRecord
from tests.helpers import generation_record, tiny_spec, write_live_gallery


def preflight(params_file: Path, overrides: list[str], home: Path, spec: dict) -> GenerationPlan:
    """What the CLI does before any Prefect server starts: parse params once, plan once."""
    return make_plan(load_params(params_file, overrides), home, GenerationSpec(**spec))


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize(
    ("override", "error", "words"),
    [
        ("alignment.method=no_such_method", ConfigError, ["unknown alignment method 'no_such_method'", "hbct"]),
        ("data.dataset=no_such_data", DataError, ["unknown dataset 'no_such_data'", "digits"]),
        ("geometry.zeta0=0", ConfigError, ["zeta0 must be > 0"]),
        ("geometry.zeta0=-1.5", ConfigError, ["zeta0 must be > 0"]),
        ("geometry.curvature=0", ConfigError, ["curvature K must be > 0"]),
        ("geometry.curvature=-1", ConfigError, ["curvature K must be > 0"]),
        ("geometry.delta_zeta=-0.2", ConfigError, ["delta_zeta must be >= 0"]),
        (["alignment.method=hbct", "alignment.options={hbct: {tau: 0}}"], ConfigError, ["tau must be > 0"]),
        (
            ["alignment.method=hbct", "alignment.options={hbct: {temperature: 1}}"],
            ConfigError,
            ["no option(s) ['temperature']"],
        ),
        ("train.epoch=3", ConfigError, ["train.epoch", "unknown key"]),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    tiny_params_file: Path, tmp_path: Path, override, error, words
):
    home = tmp_path / "ws"
    with pytest.raises(error) as info:
        overrides = [override] if isinstance(override, str) else override
        preflight(tiny_params_file, overrides, home, {"name": "g0", "classes": "all"})
    for w in words:
        assert w in str(info.value)
    assert files_under(home) == []


def test_cli_reports_the_error_and_writes_nothing(tiny_params_file: Path, tmp_path: Path):
    home = tmp_path / "ws"
    res = CliRunner().invoke(
        app, ["run", "--home", str(home), "--params", str(tiny_params_file), "--set", "geometry.delta_zeta=-1"]
    )
    assert res.exit_code == 2
    assert "delta_zeta must be >= 0" in res.output
    assert not home.exists()


def _workspace_with_parent(
    tmp_path: Path, params_file: Path, checkpoint_zeta: float, pin: bool = False
) -> tuple[Path, LineageDB]:
    """A lineage whose generation 0 record says ζ=1.0, with a checkpoint claiming ``checkpoint_zeta`` (``pin``: the
    record carries the checkpoint's sha256, as every generation committed since lineage revision 0002 does)."""
    home = tmp_path / "ws"
    p = load_params(params_file)
    ws = Workspace(home)
    ckpt = ws.generation_dir(0) / "model.pt"
    save_model(build_model(tiny_spec(num_classes=5, class_order=(0, 1, 2, 3, 4), zeta=checkpoint_zeta)), ckpt)
    store = ws.lineage(p)
    rec = generation_record(
        0,
        class_order=[0, 1, 2, 3, 4],
        checkpoint_path=str(ckpt),
        index_path=str(ws.generation_dir(0) / "index"),
        checkpoint_sha256=file_sha256(ckpt) if pin else None,
    )
    index_dir = ws.generation_dir(0) / "index"  # a real live gallery: planning verifies it
    write_live_gallery(ws.live_dir, index_dir)
    store.commit_generation(
        GenerationBundle(
            rec,
            zeta=ZetaRecord(None, 0.0, 1.0),
            pointer=PointerRecord(
                0,
                str(index_dir),
                "generation 0 embedded the gallery",
                compatible_generations=[0],
                index_sha256=file_sha256(index_dir / MANIFEST_FILE) if pin else None,
            ),
        )
    )
    return home, store


def test_parent_checkpoint_that_does_not_match_its_lineage_record_is_refused(tiny_params_file: Path, tmp_path: Path):
    home, store = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=2.0)
    before = files_under(home)
    with pytest.raises(CheckpointMismatchError, match=r"zeta: checkpoint has 2.0, lineage has 1.0"):
        preflight(tiny_params_file, [], home, {"name": "g1", "classes": "all", "alignment": "hbct"})
    assert files_under(home) == before
    assert store.count() == 1


def test_a_parent_checkpoint_swapped_for_other_weights_of_the_same_shape_is_refused(
    tiny_params_file: Path, tmp_path: Path
):
    home, store = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0, pin=True)
    spec = {"name": "g1", "classes": "all", "alignment": "hbct"}
    assert preflight(tiny_params_file, [], home, spec).parent.checkpoint_sha256 is not None  # the recorded file: fine
    ckpt = Workspace(home).generation_dir(0) / "model.pt"
    torch.manual_seed(99)  # same geometry, width, ζ and classes; other weights
    save_model(build_model(tiny_spec(num_classes=5, class_order=(0, 1, 2, 3, 4), zeta=1.0)), ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"is not the file the lineage recorded .* restore the original"):
        preflight(tiny_params_file, [], home, spec)
    assert store.count() == 1


@pytest.mark.parametrize("damage", ["truncated index", "CURRENT elsewhere"])
def test_a_live_gallery_that_cannot_serve_is_refused_before_training(tiny_params_file: Path, tmp_path: Path, damage):
    home, _ = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0)
    ws = Workspace(home)
    if damage == "truncated index":
        f = ws.generation_dir(0) / "index" / "index.faiss"
        f.write_bytes(f.read_bytes()[:100])
        words = r"the live gallery cannot serve: .*sha256"
    else:
        LivePointer(ws.live_dir).switch(tmp_path / "elsewhere", generation=0, compatible_generations=[0])
        words = r"does not name the live index the lineage records .*bctflow doctor --repair"
    before = files_under(home)
    with pytest.raises(IndexIntegrityError, match=words):
        preflight(tiny_params_file, [], home, {"name": "g1", "classes": "all", "alignment": "hbct"})
    assert files_under(home) == before


def test_a_live_index_swapped_for_another_valid_one_is_refused_by_its_pin(tiny_params_file: Path, tmp_path: Path):
    """An index folder replaced by another well-formed index (its own manifest and checksums agree) loads, but its
    manifest is not the one the lineage pinned when the gallery went live (lineage revision 0005)."""
    home, _ = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0, pin=True)
    spec = {"name": "g1", "classes": "all", "alignment": "hbct"}
    preflight(tiny_params_file, [], home, spec)  # the pinned index: fine
    ws = Workspace(home)
    write_live_gallery(ws.live_dir, ws.generation_dir(0) / "index", seed=1)  # other points, same place
    before = files_under(home)
    with pytest.raises(IndexIntegrityError, match=r"is not the manifest the lineage pinned .*`bctflow backfill`"):
        preflight(tiny_params_file, [], home, spec)
    assert files_under(home) == before


def test_matching_parent_gives_a_plan_with_zeta_grown_by_delta(tiny_params_file: Path, tmp_path: Path):
    home, _ = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0)
    plan = preflight(
        tiny_params_file, ["geometry.delta_zeta=0.25"], home, {"name": "g1", "classes": "all", "alignment": "hbct"}
    )
    assert plan.gen_id == 1 and plan.parent is not None and plan.parent.id == 0
    assert plan.zeta == pytest.approx(1.25)
    assert plan.alignment == "hbct" and plan.reference is True


def test_leftover_checkpoint_of_another_run_is_refused(tiny_params_file: Path, tmp_path: Path):
    home, _ = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0)
    spec = {"name": "g1", "classes": "all", "alignment": "hbct"}
    plan = preflight(tiny_params_file, [], home, spec)
    save_torch_atomic(
        {"format": "bctflow-train/1", "metadata": tiny_spec(zeta=1.2).to_dict(), "run_key": "someone-else"},
        plan.role_dir("model") / "checkpoints" / "epoch_0001.pt",
    )
    with pytest.raises(CheckpointMismatchError, match="belongs to another run"):
        preflight(tiny_params_file, [], home, spec)


def test_leftover_finished_model_of_another_run_is_refused(tiny_params_file: Path, tmp_path: Path):
    home, _ = _workspace_with_parent(tmp_path, tiny_params_file, checkpoint_zeta=1.0)
    spec = {"name": "g1", "classes": "all", "alignment": "hbct"}
    plan = preflight(tiny_params_file, [], home, spec)
    save_model(
        build_model(tiny_spec(zeta=1.2)),
        plan.role_dir("reference") / "model.pt",
        extra={"run_key": "an-older-run:reference"},
    )
    with pytest.raises(CheckpointMismatchError, match="model.pt belongs to another run"):
        preflight(tiny_params_file, [], home, spec)


def test_generation_zero_trains_base_only_and_says_so(tiny_params_file: Path, tmp_path: Path):
    plan = preflight(tiny_params_file, [], tmp_path / "ws", {"name": "g0", "classes": [0, 1], "alignment": "hbct"})
    assert plan.alignment == "independent" and plan.parent is None and plan.zeta == 1.0 and plan.reference is False
    assert any("base loss only" in n for n in plan.notes)


def test_overrides_parse_yaml_values(tiny_params_file: Path):
    p = apply_overrides(
        load_params(tiny_params_file), ["train.epochs=7", "model.geometry=euclidean", "backfill.rules.p_com_floor=null"]
    )
    assert (p.train.epochs, p.model.geometry, p.backfill.rules.p_com_floor) == (7, "euclidean", None)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides(p, ["train.epochs"])
    assert dataclasses.is_dataclass(Workspace(Path("x")))


@pytest.mark.parametrize("lost", ["deleted", "zero bytes"])
def test_a_lost_lineage_beside_committed_generations_is_refused(tiny_params_file: Path, tmp_path: Path, lost):
    home = tmp_path / "ws"
    (home / "generations" / "gen_000").mkdir(parents=True)
    (home / "generations" / "gen_001").mkdir()
    (home / "live").mkdir()
    (home / "live" / "CURRENT").write_text("index-v000\n")
    if lost == "zero bytes":
        (home / "lineage.db").write_bytes(b"")
    before = files_under(home)
    lost_rows = r"records no generation, but .* holds gen_000, gen_001 and a live gallery"
    with pytest.raises(LineageError, match=lost_rows) as info:
        preflight(tiny_params_file, [], home, {"name": "g0", "classes": "all"})
    assert f"the lineage database {home / 'lineage.db'} records" in str(info.value)  # the file, not sqlite://
    assert files_under(home) == before  # nothing trained, nothing registered, nothing written
