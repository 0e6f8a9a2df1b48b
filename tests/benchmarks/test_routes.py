"""`bctflow bench routes` (benchmarks/routes.py) on digits with tiny real models: every route per seed, a map that
cannot be fitted on too few pairs is reported with why, the best kind chosen on validation, the report's `auto`
lines are the rule applied to its own table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.routes import MAP_KINDS, PAIRED_FRACTIONS, run_routes
from benchmarks.routes_report import write_routes_report
from components.errors import ConfigError
from tests.benchmarks.test_bench_runs import CTX, check_written_provenance, tiny_bench
from tests.benchmarks.test_committed_results import check_routes_auto


def test_every_route_is_measured_per_seed_and_the_report_applies_the_rule_to_its_table(tmp_path: Path):
    b = tiny_bench(tmp_path, [{"name": "hbct", "method": "hbct", "geometry": "lorentz"}])
    res = run_routes(b, "ext_class")
    n = len(b.test)
    need = 2 * 16  # the tiny models' 16-wide maps: two pairs per dimension
    for seed in (0, 1):
        rows = res.rows[seed]
        assert [r["route"] for r in rows[:2]] == ["compatible", "backfill"]
        assert [(r["route"], r["fraction"]) for r in rows[2:]] == [
            (role, f) for f in PAIRED_FRACTIONS for role in ("adapter", "transform")
        ]
        base = res.base[seed]
        backfill = rows[1]
        assert backfill["map"] == pytest.approx(base["ref_self_map"]) and backfill["during_map"] == base["old_self_map"]
        for r in rows[2:]:
            assert r["pairs"] == min(len(b.train), math.ceil(r["fraction"] * n))
            if r["pairs"] < need:  # too few pairs for any kind: said, not guessed
                assert r["map"] is None
                assert r["why"] == f"{r['pairs']} pairs, a 16-wide map needs {need} (2 per dimension)"
                assert all(str(v).startswith("not fitted: ") for v in r["tried"].values())
                continue
            assert r["kind"] in MAP_KINDS and set(r["tried"]) == set(MAP_KINDS)
            fitted = {k: v for k, v in r["tried"].items() if isinstance(v, float)}
            assert r["kind"] == max(fitted, key=fitted.get)  # the best validation served mAP
            if r["route"] == "adapter":
                assert r["during_map"] == r["map"] and r["gallery_s_per_item"] == 0.0 and r["query_us"] > 0
                assert r["recovered_cmc10"] == pytest.approx(r["cmc@10"] / backfill["cmc@10"])
            else:
                assert r["during_map"] == base["old_self_map"] and r["gallery_s_per_item"] > 0
        assert any(r["map"] is not None for r in rows[2:]), "the largest sample fits a map"
    md = write_routes_report(res, CTX, tmp_path / "report")
    text = md.read_text()
    assert "| backfill | " in text and "not fitted: 1 pairs, a 16-wide map needs 32" in text
    check_routes_auto(json.loads((tmp_path / "report" / "results.json").read_text()))
    check_written_provenance(tmp_path / "report")
    with pytest.raises(ConfigError, match="^bctflow bench routes runs ext_class or ext_data, not 'both'$"):
        run_routes(b, "both")
