"""`bctflow bench lifecycle` (benchmarks/lifecycle.py, lifecycle_stream.py, lifecycle_report.py): a short season on
digits — the never, always and budget policies, each in its own workspace running the real nightly flow, a corpus
that grows (ingested by the live gallery's model), a degraded night — and the report's every promised key; bad
input is one line before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchmarks.lifecycle_stream import StreamSettings, night_plan
from tests.conftest import REPO

TINY = {
    "description": "a short lifecycle season on digits (the test's)",
    "params": {
        "data": {"dataset": "digits", "max_test_per_class": 30},
        "model": {"backbone_kwargs": {"channels": [8, 8, 16, 16]}, "embed_dim": 16},
        "train": {"epochs": 1, "batch_size": 128},
    },
    "bench": {
        "methods": [{"name": "bct", "method": "bct"}],
        "old_arch": {"backbone": "resnet18"},
        "new_arch": {"backbone": "resnet18"},
    },
    "lifecycle": {
        "nights": 2,
        "classes_start": 4,
        "per_class_start": 30,
        "per_class_step": 10,
        "per_class_max": 60,
        "arch_night": None,
        "degraded_night": 1,
        "corpus_start": 100,
        "corpus_step": 50,
        "queries": 100,
        "epochs": 2,
        "budget_items": 200,
    },
}
POLICY_KEYS = {"served_map_area", "items_reembedded", "compute_s", "backfills", "promotions", "degraded_promoted",
               "per_night"}  # fmt: skip
NIGHT_KEYS = {"night", "action", "reason", "served_map", "forecast_map", "items_reembedded"}


def _bench(tmp_path: Path, *args: str, server: bool = True) -> subprocess.CompletedProcess:
    from prefect.settings import PREFECT_API_URL

    profile = tmp_path / "tiny.yaml"
    profile.write_text(yaml.safe_dump(TINY))
    env = dict(os.environ)
    if server:
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()  # the test's Prefect server
    cmd = [sys.executable, "-m", "bctflow.cli", "bench", "lifecycle", "--profile", str(profile),
           "--home", str(tmp_path / "home"), "--out", str(tmp_path / "out"), *args]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)


def test_the_stream_brings_classes_data_and_a_degraded_night():
    s = StreamSettings(nights=8)
    nights = night_plan(s, 10)
    assert [len(n.classes) for n in nights] == [4, 5, 6, 7, 8, 9, 10, 10]
    assert [n.per_class for n in nights] == [300, 400, 500, 600, 700, 800, 900, 1000]
    assert [n.kind for n in nights][4:7] == ["degraded", "classes", "arch"]
    assert nights[4].spec["fraction"] == s.degraded_fraction and "backbone_kwargs" in nights[6].spec
    assert nights[7].spec["backbone_kwargs"] == nights[6].spec["backbone_kwargs"]  # the new architecture stays
    assert np.diff([n.corpus for n in nights]).tolist() == [s.corpus_step] * 7


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.timeout(1500)
def test_a_short_season_reports_every_policy_and_judges_the_rules(tmp_path: Path):
    res = _bench(tmp_path, "--policies", "never,always,budget")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "MLflow run" in res.stdout  # the report, its JSON and plots logged as the run's artifacts
    folder = tmp_path / "out" / "tiny-zeta"
    doc = json.loads((folder / "lifecycle.json").read_text())
    assert doc["nights"] == 2 and set(doc["policies"]) == {"never", "always", "budget"}
    for name, p in doc["policies"].items():
        assert set(p) >= POLICY_KEYS, name
        assert [n["night"] for n in p["per_night"]] == [0, 1] and all(set(n) >= NIGHT_KEYS for n in p["per_night"])
    always, never = doc["policies"]["always"], doc["policies"]["never"]
    assert [n["action"] for n in always["per_night"]][1:] == ["full"] and always["backfills"] == 1
    assert always["items_reembedded"] > 0 and never["items_reembedded"] == 0
    assert set(doc["rules"]) >= {"backfill_required", "compatibility", "clip_fraction_max", "zeta_ceiling"}
    assert all({"precision", "recall"} <= set(r) for r in doc["rules"].values())
    assert doc["provenance"]["commit"] and (folder / "served_map.png").exists() and (folder / "report.md").exists()
    assert not doc["policies"]["budget"]["degraded_promoted"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nights", "1"], "--nights 1: a lifecycle needs at least 2 nights"),
        (["--policies", "never,sometimes"], "unknown policies ['sometimes']; use any of"),
        (["--lineage", "poincare"], "unknown --lineage 'poincare'; use one of zeta, euclidean"),
    ],
)
def test_bad_requests_are_one_line_before_anything_starts(tmp_path: Path, args: list[str], message: str):
    res = _bench(tmp_path, *args, server=False)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "home" / "bench-lifecycle" / "zeta").exists()
