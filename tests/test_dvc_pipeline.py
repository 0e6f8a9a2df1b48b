"""`dvc repro` on a fresh git clone reproduces the declared chain; a second run is up to date.

Real git, real DVC, the real `bctflow` console script (tiny settings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def run(cmd: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "BCTFLOW_HOME": str(cwd / ".bctflow"),
    }
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout + res.stderr


def test_dvc_repro_reproduces_the_chain_and_then_is_up_to_date(tmp_path: Path):
    """On a plain `git clone` of this repository (committed files only: no `dvc init`), as the README says."""
    proj = tmp_path / "proj"
    run(["git", "clone", "-q", str(REPO), str(proj)], tmp_path)
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["model"]["backbone_kwargs"] = {"channels": [8, 8, 16, 16]}
    params["model"]["embed_dim"] = 16
    params["train"]["epochs"] = 1
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    run([str(BIN / "dvc"), "repro"], proj)
    metrics = json.loads((proj / "outputs" / "metrics.json").read_text())
    declared = [g["name"] for g in params["generations"]]
    assert metrics["g0.zeta"] == 1.0 and abs(metrics["g1.zeta"] - 1.2) < 1e-9
    assert {f"{n}.self.map" for n in declared} <= set(metrics)
    for name in declared:
        assert (proj / "outputs" / "data" / f"{name}.json").exists()
    lineage = json.loads(run([str(BIN / "bctflow"), "lineage", "--home", "outputs/workspace", "--json"], proj))
    assert [g["name"] for g in lineage] == declared

    second = run([str(BIN / "dvc"), "repro"], proj)
    assert "Data and pipelines are up to date." in second
    status = run([str(BIN / "dvc"), "status"], proj)
    assert "Data and pipelines are up to date." in status
