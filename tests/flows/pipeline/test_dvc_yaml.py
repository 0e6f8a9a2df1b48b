"""dvc.yaml is generated from params.yaml (flows/pipeline/dvc_yaml.py): the committed file is what the generator
writes, each
generation's stage names exactly the parameters that shape it, and bad input is one error (docs/design.md §7.15).
The pipeline itself runs under real DVC in tests/test_dvc_pipeline.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.errors import ConfigError
from flows.params import apply_overrides, load_params
from flows.pipeline.dvc_yaml import check_dvc_yaml, dvc_yaml, param_keys
from tests.conftest import REPO

THREE = (
    "generations=[{name: g0, classes: [0, 1, 2, 3, 4]}, {name: g1, classes: all, alignment: hbct, reference: true}, "
    "{name: g2, classes: all, alignment: bct}]"
)


def _raw(params) -> dict:
    return params.as_dict()


def test_the_committed_dvc_yaml_is_what_the_generator_writes_from_params_yaml():
    committed = (REPO / "dvc.yaml").read_text()
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert committed == dvc_yaml(load_params(REPO / "params.yaml"), raw), (
        "dvc.yaml is out of date: run `bctflow pipeline --write-dvc-yaml` from the repository root"
    )
    assert committed.startswith("# GENERATED from params.yaml")
    doc = yaml.safe_load(committed)
    names = [g["name"] for g in raw["generations"]]
    assert list(doc["stages"]) == ["data", *names]
    for stage in doc["stages"].values():
        assert "--set" not in stage["cmd"] and "rm " not in stage["cmd"]  # params.yaml as it is; DVC clears outputs
    template = REPO / ".dvc" / "plots" / "compatibility.json"
    assert template.is_file() and "<DVC_METRIC_DATA>" in template.read_text()
    assert [next(iter(p)) for p in doc["plots"]] == ["training loss", "training accuracy", "compatibility"]
    for name in names:  # and each stage's PNG images, which `dvc plots show` shows with no network
        assert doc["stages"][name]["plots"] == [
            {f"results/{name}/training.png": {"cache": False}},
            {f"results/{name}/compatibility.png": {"cache": False}},
        ]


def test_generation_0_depends_on_neither_the_alignment_nor_the_growth_of_zeta_nor_the_backfill_rules():
    params = load_params(REPO / "params.yaml")
    g0, g1 = param_keys(params, 0), param_keys(params, 1)
    assert not [k for k in g0 if k.startswith(("alignment", "backfill"))]
    assert "geometry.zeta0" in g0 and "geometry.delta_zeta" not in g0 and "geometry" not in g0
    assert "evaluation.reference" not in g0 and "evaluation.cmc_k" in g0
    # g1 names no method of its own: alignment.method, λ and that method's options shape it
    assert {"alignment.method", "alignment.weight", "alignment.options.bct", "geometry", "evaluation"} <= set(g1)
    assert "alignment.options.hbct" not in g1 and "backfill.rules" in g1
    # an entry that names its method depends on that method's options, not on alignment.method
    named = param_keys(apply_overrides(params, ["generations=[{name: a}, {name: b, alignment: hbct}]"]), 1)
    assert [k for k in named if k.startswith("alignment")] == ["alignment.weight", "alignment.options.hbct"]
    for keys, own in ((g0, "generations.0"), (g1, "generations.1")):
        assert keys[-1] == own and "generations" not in keys
        assert {"model", "index", "gallery.store", "train.epochs", "data.dataset"} <= set(keys)
        assert "gallery.keep_versions" not in keys  # retention shapes no generation
        # where the stores are, devices, process counts and a backfill's operations shape no generation
        leaked = {"train.device", "train.nproc", "train.compile", "data.root", "tracking.mlflow_uri", "backfill.order"}
        assert not leaked & set(keys)
        assert not [k for k in keys if k.startswith(("schedule", "lineage"))] and "train" not in keys


def test_each_generation_depends_on_its_predecessor_workspace_and_its_own_manifest():
    params = apply_overrides(load_params(REPO / "params.yaml"), [THREE, "alignment.options.bct={}"])
    stages = yaml.safe_load(dvc_yaml(params, _raw(params)))["stages"]
    assert stages["g0"]["deps"][0] == "outputs/data/g0.json" and "--parent" not in stages["g0"]["cmd"]
    assert stages["g1"]["deps"][:2] == ["outputs/g0/workspace", "outputs/data/g1.json"]
    assert stages["g2"]["deps"][:2] == ["outputs/g1/workspace", "outputs/data/g2.json"]
    assert "--parent outputs/g1/workspace" in stages["g2"]["cmd"]
    assert "alignment.options.bct" in stages["g2"]["params"] and "alignment.options.hbct" not in stages["g2"]["params"]
    assert stages["g2"]["outs"][0] == "outputs/g2/workspace"
    assert stages["g2"]["metrics"] == [{"results/g2/metrics.json": {"cache": False}}]
    # an entry without its own method follows alignment.method; an independent one reads no alignment key
    unnamed = apply_overrides(params, ["generations=[{name: a}, {name: b}, {name: c, alignment: independent}]"])
    assert [k for k in param_keys(unnamed, 1) if k.startswith("alignment")] == [
        "alignment.method",
        "alignment.weight",
        "alignment.options.bct",
    ]
    assert not [k for k in param_keys(unnamed, 2) if k.startswith("alignment")]


def test_a_key_dvc_would_track_but_params_yaml_lacks_is_one_error_naming_it_and_its_default():
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    del raw["train"]["base_loss"]
    with pytest.raises(ConfigError, match=r"params.yaml lacks train.base_loss \(default 'ce'\): DVC tracks each"):
        dvc_yaml(load_params(REPO / "params.yaml"), raw)


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ("generations=[{name: data}]", "generation name 'data' cannot name a DVC stage"),
        ("generations=[{name: g/0}]", "generation name 'g/0' cannot name a DVC stage"),
        ("lineage.db_url=sqlite:////tmp/elsewhere.db", "lineage.db_url and tracking.mlflow_uri must be null"),
        ("generations=[]", "declares no `generations:`"),
    ],
)
def test_what_cannot_be_a_dvc_pipeline_is_refused(override: str, why: str):
    params = apply_overrides(load_params(REPO / "params.yaml"), [override])
    with pytest.raises(ConfigError, match=why):
        dvc_yaml(params, _raw(params))


def test_write_dvc_yaml_follows_params_yaml_and_a_stage_refuses_a_stale_one(tmp_path: Path, monkeypatch):
    from bctflow.cli import app

    params = apply_overrides(load_params(REPO / "params.yaml"), ["alignment.options.bct={}"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params.as_dict(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["pipeline", "--write-dvc-yaml"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "dvc.yaml").read_text() == dvc_yaml(params, params.as_dict())
    check_dvc_yaml(tmp_path / "dvc.yaml", tmp_path / "params.yaml")  # current: no error
    # a value change keeps the file current (λ is a tracked value, not a stage); a third generation does not
    moved = apply_overrides(params, ["alignment.weight=0.5"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(moved.as_dict(), sort_keys=False))
    check_dvc_yaml(tmp_path / "dvc.yaml", tmp_path / "params.yaml")
    grown = apply_overrides(params, [THREE])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(grown.as_dict(), sort_keys=False))
    res = CliRunner().invoke(app, ["stage", "data", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "dvc.yaml is not what params.yaml generates" in res.output
    assert "run `bctflow pipeline --write-dvc-yaml`, then `dvc repro` again" in res.output
    assert not (tmp_path / "out").exists()
