"""The README's demo table is the claim this test checks: `bctflow demo` with the shipped params.yaml, run as a user
runs it, prints the README's numbers within the tolerances the README states (other CPUs print other digits)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.params import load_params
from tests.conftest import REPO

#: the method the shipped chain trains g1 with (its rows are labelled by it)
_SHIPPED = load_params(REPO / "params.yaml")
G1 = _SHIPPED.generations[1].alignment or _SHIPPED.alignment.method
#: the tolerances README.md states beside its demo table
MAP_TOL, CMC_TOL, P_COM_TOL = 0.05, 0.10, 0.10
NUMBER = re.compile(r"-?\d+\.\d+")
BORDERS = str.maketrans("│┃", "  ")


def table_rows(text: str) -> dict[str, list[float]]:
    """Each printed table row that ends in numbers, by its label (the words before them, spaces collapsed):
    ``'g1 hbct (cross) g0 (live gallery)' → [CMC@1, CMC@5, mAP]``, ``'g1 hbct map' → [P_com, denominator, P_up]``."""
    rows: dict[str, list[float]] = {}
    for line in text.translate(BORDERS).splitlines():
        first = NUMBER.search(line)
        label = " ".join(line[: first.start()].split()) if first else ""
        if first and label.startswith("g") and not line[first.end() :].strip(" 0123456789.-"):
            rows[label] = [float(x) for x in NUMBER.findall(line[first.start() :])]
    return rows


def readme_table() -> dict[str, list[float]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## The demo", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    return table_rows(block)


def test_the_table_reader_reads_rows_by_label():
    rows = table_rows(
        "│ g1 hbct (cross)    │ g0 (live gallery) │ 0.8163 │ 0.9759 │ 0.6323 │\n"
        " g1 hbct      map       0.143        0.4044   0.0104\n"
        "demo finished in 179s.\ng1: backfill required — 99% of gallery embeddings sit on the clip radius > 95%\n"
    )
    assert rows == {
        "g1 hbct (cross) g0 (live gallery)": [0.8163, 0.9759, 0.6323],
        "g1 hbct map": [0.143, 0.4044, 0.0104],
    }


def test_the_readme_table_has_every_row_the_test_checks():
    rows = readme_table()
    assert len([k for k in rows if len(rows[k]) == 3 and not k.endswith(("map", "cmc@1"))]) == 6, rows
    assert {f"g1 {G1} map", f"g1 {G1} cmc@1"} <= set(rows), rows


#: the whole demo takes 8 min of CI's 30 (3 min alone, 8 beside the other worker): run where it is asked for
RUN_DEMO = os.environ.get("BCTFLOW_RUN_DEMO") == "1"


@pytest.mark.skipif(not RUN_DEMO, reason="the whole demo (8 min in CI): BCTFLOW_RUN_DEMO=1 runs it")
@pytest.mark.usefixtures("prefect_harness")
def test_the_demo_prints_the_readme_table_within_its_stated_tolerance(tmp_path: Path):
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "200"}  # the test's Prefect server
    env.pop("OMP_NUM_THREADS", None)  # the demo as a user runs it: torch's own thread count
    res = subprocess.run(
        [sys.executable, "-m", "bctflow.cli", "demo", "--reset", "--home", str(tmp_path / "demo")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    printed, claimed = table_rows(res.stdout), readme_table()
    off = []
    for label, want in claimed.items():
        got = printed.get(label)
        assert got is not None and len(got) == len(want), f"the demo printed no row {label!r}: {sorted(printed)}"
        if label.endswith(" map"):  # P_com (its denominator moves with old-old and φ*: not held); P_up is not claimed
            pairs = [(got[0], want[0], P_COM_TOL, "P_com")]
        elif label.endswith(" cmc@1"):  # CMC@1 P_com's denominator is small: the README says it swings
            pairs = []
        elif "φ* (cross)" in label:  # an unaligned model on the old gallery: near chance, only its mAP is claimed
            pairs = [(got[2], want[2], MAP_TOL, "mAP")]
        else:
            pairs = [(g, w, CMC_TOL, c) for g, w, c in zip(got[:2], want[:2], ("CMC@1", "CMC@5"))]
            pairs.append((got[2], want[2], MAP_TOL, "mAP"))
        off += [f"{label} {name}: {g:.4f} vs README {w:.4f}" for g, w, tol, name in pairs if abs(g - w) > tol]
    assert not off, "the demo is outside the README's stated tolerance: " + "; ".join(off)
    cross, old_old = printed[f"g1 {G1} (cross) g0 (live gallery)"][2], printed["g0 (old-old) g0"][2]
    assert cross > old_old, "the README says g1's queries serve g0's gallery better than g0 does (mAP)"
    assert cross > 2 * printed["g1 reference φ* (cross) g0"][2], "and far better than an unaligned model's queries"
    g1_self, g0_self = printed[f"g1 {G1} g1"][2], printed["g0 independent g0"][2]
    if g1_self >= g0_self:  # compatible and not worse: the default gate promotes it; the clip check only warns
        assert "g1: no backfill required — promoted" in res.stdout, res.stdout[-2000:]
