"""The committed method tables of the equal-budget protocol: no row was selected by self quality alone; and the
committed upgrade-route tables: the route `upgrade.route: auto` is said to take is the one the rule takes on them.

Every ``benchmarks/results/<profile>/<scenario>/results.json`` written under the one selection rule (its context names
the rule) is checked: each trained row's rule is one of the two of benchmarks/selection.py, its configuration count is
the number of configurations tried, and re-applying the rule to the stored validation scores picks the very
configuration the row reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.selection import CONSTRAINT_NOT_MET, SELECTION_RULES, Scored, select_configuration
from tests.conftest import REPO

RESULTS = sorted(
    p
    for p in (REPO / "benchmarks" / "results").glob("*/*/results.json")
    if "selection_rule" in json.loads(p.read_text()).get("context", {}) and not p.parent.name.startswith("routes-")
)
#: the committed `bctflow bench routes` reports
ROUTE_RESULTS = sorted((REPO / "benchmarks" / "results").glob("*/routes-*/results.json"))


def test_the_equal_budget_protocol_has_committed_results():
    """At least one table (the digits_equal smoke run; the cpu_equal tables once committed) is checked below."""
    assert RESULTS, "no results.json written under the one selection rule in benchmarks/results/"


@pytest.mark.parametrize(
    "path", RESULTS, ids=[str(p.parent.relative_to(REPO / "benchmarks" / "results")) for p in RESULTS]
)
def test_no_row_was_selected_by_self_quality_alone(path: Path):
    doc = json.loads(path.read_text())
    floor = doc["context"]["p_up_floor"]
    tried: dict[str, list[dict]] = {}
    for h in doc["heads_tried"]:
        tried.setdefault(h["method"], []).append(h)
    for row in doc["rows"]:
        if row["selection_rule"] in ("training-free", "not applicable"):
            assert row["method"] in ("psp", "lsp") and row["configurations"] == 1
            continue
        assert row["selection_rule"] in SELECTION_RULES, (row["name"], row["selection_rule"])
        configs = tried[row["name"]]
        assert row["configurations"] == len(configs) == doc["configurations"][row["name"]]
        i, rule = select_configuration([Scored(c["val_p_com"], c["val_p_up"]) for c in configs], floor)
        assert rule == row["selection_rule"] and [c["chosen"] for c in configs].index(True) == i
        pick = configs[i]
        assert (pick["head"], pick["weight"], pick["options"]) == (row["head"], row["weight"], row["options"])
        if rule == CONSTRAINT_NOT_MET:  # flagged, and truly no configuration kept validation P_up
            assert all(c["val_p_up"] is None or c["val_p_up"] < floor for c in configs)


def check_routes_auto(doc: dict) -> None:
    """Each of a routes report's ``auto`` lines is :func:`flows.upgrade.route_rule.choose_route` applied to its own mean
    rows (each route at its largest fitted sample): the rule, pinned on the table."""
    from flows.upgrade.route_rule import RouteEvidence, choose_route

    evidence = []
    for route in ("compatible", "adapter", "transform", "backfill"):
        fitted = [r for r in doc["mean"] if r["route"] == route and r["map"] is not None]
        if fitted:
            r = fitted[-1]
            evidence.append(RouteEvidence(route, r["map"], r["gallery_s_per_item"], r.get("query_us") or 0.0))
    assert doc["auto"], "the report shows auto at no bar"
    for a in doc["auto"]:
        c = choose_route(evidence, items=a["items"], min_map=a["bar"])
        assert (c.route, c.met_bar, c.line) == (a["route"], a["met_bar"], a["line"]), a


@pytest.mark.parametrize(
    "path", ROUTE_RESULTS, ids=[str(p.parent.relative_to(REPO / "benchmarks" / "results")) for p in ROUTE_RESULTS]
)
def test_the_committed_route_tables_say_what_auto_takes(path: Path):
    check_routes_auto(json.loads(path.read_text()))
