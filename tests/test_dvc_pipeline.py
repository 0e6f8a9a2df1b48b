"""The DVC pipeline as its users run it, on a plain `git clone` of this repository (committed files only: no
`dvc init`), with the real `dvc` and `bctflow` commands (tiny settings; docs/design.md §7.15):

`dvc repro` runs the data stage and one stage per generation; a second `dvc repro` is up to date; after committing,
`dvc exp run -S alignment.weight=0.5` re-runs only g1's stage; `dvc exp show`, `dvc metrics diff`, `dvc params diff`
show numbers; `dvc plots show` writes the training curves and the compatibility heatmap, as Vega-Lite data plots and
as the PNG images each stage wrote (which the page shows with no network).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner, Result

from bctflow.cli import app
from flows.pipeline.dvc_stage import PNG_PLOTS
from tests.conftest import REPO

BIN = Path(sys.executable).parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHAIN = ["g0", "g1"]


def run(cmd: list[str], cwd: Path, ok: bool = True) -> str:
    """Run ``cmd`` in the clone, with the clone's code on the path (the stages run the clone's `bctflow`)."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=str(cwd),
        BCTFLOW_HOME=str(cwd / ".bctflow"),
        PREFECT_API_URL=PREFECT_API_URL.value(),  # the session's Prefect server: no temporary server per stage
    )
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if ok:
        assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout + res.stderr


def dvc(*args: str, cwd: Path, ok: bool = True) -> str:
    return run([str(BIN / "dvc"), *args], cwd, ok)


def ran(output: str) -> list[str]:
    return [line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage '")]


def bctflow(args: list[str], proj: Path) -> Result:
    """`bctflow ARGS` in the clone (its params.yaml, paths relative to it) — the real CLI, in this process: a child
    process a call, each importing torch, MLflow and the project, took ~5 s of one CI worker (the stages that DVC
    runs are child processes)."""
    with contextlib.chdir(proj):
        return CliRunner().invoke(app, args, env={"BCTFLOW_HOME": str(proj / ".bctflow")})


def lineage(proj: Path, name: str) -> list[dict]:
    res = bctflow(["lineage", "--home", f"outputs/{name}/workspace", "--json"], proj)
    assert res.exit_code == 0, res.output[-3000:]
    return json.loads(res.stdout)


def refused(args: list[str], proj: Path) -> str:
    """The one line ``bctflow ARGS`` is refused with (exit 2, no exception escaping the CLI)."""
    res = bctflow(args, proj)
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output[-3000:]
    return res.output


def clone_with_tiny_params(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    run(["git", "clone", "-q", str(REPO), str(proj)], tmp_path)
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["model"]["backbone_kwargs"] = {"channels": [8, 8, 16, 16]}
    params["model"]["embed_dim"] = 16
    params["train"].update(epochs=1, batch_size=128)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "tiny settings"], proj)
    return proj


def check_repro(proj: Path) -> None:
    out = dvc("repro", cwd=proj)
    assert ran(out) == ["data", *CHAIN]
    assert [g["name"] for g in lineage(proj, "g0")] == ["g0"]  # each stage's workspace: the chain up to it
    chain = lineage(proj, "g1")
    assert [g["name"] for g in chain] == CHAIN and [g["id"] for g in chain] == [0, 1]
    for g in chain:  # the lineage's data hash is DVC's md5 of the data stage's manifest
        assert g["data_hash"] == hashlib.md5((proj / "outputs" / "data" / f"{g['name']}.json").read_bytes()).hexdigest()
    m0, m1 = (json.loads((proj / "results" / n / "metrics.json").read_text()) for n in CHAIN)
    assert m0["zeta"] == 1.0 and abs(m1["zeta"] - 1.2) < 1e-9 and "cross" not in m0
    assert m1["self"]["map"] == chain[1]["metrics"]["self"]["map"] and m1["cross"] == chain[1]["metrics"]["cross"]
    assert {"map", "cmc@1"} <= set(m1["p_com"]) and {"map", "cmc@1"} <= set(m1["p_up"])
    assert m1["backfill_required"] == chain[1]["backfill_required"]
    curve = (proj / "results" / "g1" / "training.csv").read_text().splitlines()
    assert curve[0].startswith("epoch,") and {"loss", "train_accuracy"} <= set(curve[0].split(",")) and len(curve) == 2
    stages = yaml.safe_load((proj / "dvc.yaml").read_text())["stages"]
    for name in CHAIN:  # each stage declares its PNG plots and wrote them
        declared = [next(iter(p)) for p in stages[name]["plots"]]
        assert declared == [f"results/{name}/training.png", f"results/{name}/compatibility.png"]
        for png in declared:
            assert (proj / png).read_bytes()[:8] == PNG_MAGIC, png
    cells = json.loads((proj / "results" / "g1" / "compatibility.json").read_text())
    assert {(c["query"], c["gallery"]) for c in cells if c["metric"] == "map"} == {
        ("g0", "g0"),
        ("g1", "g0"),
        ("g1", "g1"),
    }
    again = dvc("repro", cwd=proj)
    assert ran(again) == [] and "Data and pipelines are up to date." in again
    untracked = run(["git", "status", "--porcelain"], proj).split()  # what to commit; the outputs are DVC's
    assert "dvc.lock" in untracked and "results/" in untracked and not [p for p in untracked if "outputs" in p]


def check_refusals(proj: Path, elsewhere: Path) -> None:
    """A stage run by hand with the wrong --parent, into a full folder or before its manifest exists: one error line
    each, nothing trained, no workspace left behind."""
    stage = ["stage", "generation", "g1", "--results", str(elsewhere / "results")]
    wrong_parent = refused([*stage, "--parent", "outputs/g1/workspace", "--manifest", "outputs/data/g1.json", "--home",
                            str(elsewhere / "ws")], proj)  # fmt: skip
    assert "holds generations ['g0', 'g1'], not ['g0']" in wrong_parent and not (elsewhere / "ws").exists()
    full = refused([*stage, "--parent", "outputs/g0/workspace", "--manifest", "outputs/data/g1.json", "--home",
                    "outputs/g0/workspace"], proj)  # fmt: skip
    assert "outputs/g0/workspace is not empty; a stage starts from an empty workspace" in full
    no_data = refused([*stage, "--parent", "outputs/g0/workspace", "--manifest", str(elsewhere / "g1.json"),
                       "--home", str(elsewhere / "ws")], proj)  # fmt: skip
    assert f"the data manifest {elsewhere / 'g1.json'} does not exist" in no_data
    assert not (elsewhere / "results").exists()
    assert "Data and pipelines are up to date." in dvc("status", cwd=proj)  # the outputs are untouched


def test_dvc_repro_exp_run_exp_show_metrics_and_plots_on_a_fresh_clone(tmp_path: Path, prefect_harness):
    proj = clone_with_tiny_params(tmp_path)
    check_repro(proj)
    check_refusals(proj, tmp_path / "elsewhere")
    run(["git", "add", "-A"], proj)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "dvc repro"], proj)
    g0_state = (proj / "outputs" / "g0" / "workspace" / "lineage.db").stat().st_mtime_ns
    before = json.loads((proj / "results" / "g1" / "metrics.json").read_text())
    shipped = yaml.safe_load((proj / "params.yaml").read_text())["alignment"]["weight"]
    assert shipped != 0.5

    out = dvc("exp", "run", "-S", "alignment.weight=0.5", cwd=proj)
    assert ran(out) == ["g1"], out[-3000:]  # λ shapes g1 only: g0 and the data are not re-run
    assert "Stage 'g0' didn't change, skipping" in out and "Stage 'data' didn't change, skipping" in out
    assert (proj / "outputs" / "g0" / "workspace" / "lineage.db").stat().st_mtime_ns == g0_state
    assert [g["name"] for g in lineage(proj, "g1")] == CHAIN
    after = json.loads((proj / "results" / "g1" / "metrics.json").read_text())
    assert after["self"] != before["self"]  # another λ, another model

    rows = json.loads(dvc("exp", "show", "--json", cwd=proj))
    baseline = next(r for r in rows if r["rev"] != "workspace")
    (exp,) = baseline["experiments"]
    for row, weight, metrics in ((baseline, shipped, before), (exp["revs"][0], 0.5, after)):
        data = row["data"]
        assert data["params"]["params.yaml"]["data"]["alignment"]["weight"] == weight
        shown = data["metrics"]["results/g1/metrics.json"]["data"]
        assert shown["self"]["map"] == metrics["self"]["map"] and shown["backfill_required"] in (True, False)
        assert data["metrics"]["results/g0/metrics.json"]["data"]["self"]["map"] > 0
    table = dvc("exp", "show", "--md", "--drop", ".*", "--keep", "Experiment|.*g1/metrics.json:self.map", cwd=proj)
    assert "!" not in table and f"{after['self']['map']:.5f}"[:6] in table

    diffs = json.loads(dvc("metrics", "diff", "--json", cwd=proj))
    diff = diffs["results/g1/metrics.json"]
    assert diff["self.map"]["old"] == before["self"]["map"] and diff["self.map"]["new"] == after["self"]["map"]
    assert "results/g0/metrics.json" not in diffs
    params = json.loads(dvc("params", "diff", "--json", cwd=proj))["params.yaml"]
    assert {key: (v["old"], v["new"]) for key, v in params.items()} == {"alignment.weight": (shipped, 0.5)}

    dvc("plots", "show", cwd=proj)
    page = (proj / "dvc_plots" / "index.html").read_text()
    for title in ("training loss", "training accuracy", "compatibility as of g1"):
        assert title in page
    assert page.count('"query": "g1"') >= 2 and '"train_accuracy"' in page  # the data, not only the titles
    # offline, DVC's Vega-Lite charts stay blank (their script comes from a CDN); the stages' PNGs are local files
    images = re.findall(r'<img src="([^"]+)"', page)
    assert {Path(i).name for i in images} == {f"workspace_results_{n}_{png}" for n in CHAIN for png in PNG_PLOTS}
    for src in images:
        assert (proj / "dvc_plots" / src).read_bytes()[:8] == PNG_MAGIC and "://" not in src
    plots = json.loads(dvc("plots", "diff", "HEAD", "--json", cwd=proj))
    heatmap = plots["data"]["compatibility"][0]["content"]
    assert {row["rev"] for row in heatmap["data"]["values"]} == {"HEAD", "workspace"}
