"""The upgrade route rule (flows/upgrade/route_rule.py) pinned on synthetic tables: the cheapest route reaching the bar,
ties by quality then kind, the most-serving route (said so) when none reaches it, the user's own choice, refusals."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from flows.upgrade.route_rule import ROUTES, RouteEvidence, check_route, choose_route

#: a gallery of 1M items; a forward pass 2 ms per item, the transform's map 2 µs: costs 0, 0, 2 s, 2000 s
TABLE = [
    RouteEvidence("compatible", 0.50, 0.0),
    RouteEvidence("adapter", 0.58, 0.0, query_us=3.0),
    RouteEvidence("transform", 0.61, 2e-6),
    RouteEvidence("backfill", 0.66, 2e-3),
]
ITEMS = 1_000_000


@pytest.mark.parametrize(
    ("bar", "route", "met"),
    [
        (0.40, "adapter", True),  # compatible and adapter both free: the one that serves more
        (0.55, "adapter", True),
        (0.59, "transform", True),  # 2 s beats the backfill's 2000 s
        (0.62, "backfill", True),
        (0.70, "backfill", False),  # none reaches it: the one that serves the most, and the line says so
    ],
)
def test_auto_takes_the_cheapest_route_reaching_the_bar(bar, route, met):
    c = choose_route(TABLE, items=ITEMS, min_map=bar)
    assert (c.route, c.met_bar) == (route, met)
    assert c.line.startswith(f"upgrade route {route}: ") and "\n" not in c.line
    assert ("no route reaches upgrade.min_map" in c.line) is (not met)
    assert "transform mAP 0.6100, 2.0 s" in c.line and "backfill mAP 0.6600, 2,000.0 s" in c.line


def test_equal_cost_and_quality_fall_to_the_cheaper_kind_and_an_unmeasured_route_is_never_taken():
    same = [RouteEvidence(r, 0.6, 0.0) for r in ("backfill", "adapter", "compatible")]
    assert choose_route(same, items=10, min_map=0.5).route == "compatible"
    unmeasured = [RouteEvidence("adapter", None, 0.0), RouteEvidence("backfill", 0.6, 1e-3)]
    c = choose_route(unmeasured, items=10, min_map=0.1)
    assert c.route == "backfill" and "adapter not measured" in c.line
    # a small gallery: a backfill costs less than a slow transform
    small = [RouteEvidence("transform", 0.7, 1e-2), RouteEvidence("backfill", 0.7, 1e-3)]
    assert choose_route(small, items=100, min_map=0.5).route == "backfill"


def test_a_route_the_user_sets_is_taken_with_the_measurements_beside_it():
    c = choose_route(TABLE, items=ITEMS, min_map=0.9, route="compatible")
    assert (c.route, c.met_bar) == ("compatible", False)
    assert c.line.startswith("upgrade route compatible (set by upgrade.route): compatible mAP 0.5000, 0.0 s;")
    assert choose_route(TABLE, items=ITEMS, min_map=None, route="adapter").met_bar


def test_the_bar_is_named_in_the_line_by_the_words_given():
    """A bar resolved elsewhere ("no worse than now", flows/upgrade/choose.py) is named in the line by its own
    words; without them the line names upgrade.min_map."""
    now = "the bar 0.5900 (no worse than now)"
    c = choose_route(TABLE, items=ITEMS, min_map=0.59, bar=now)
    assert c.line.startswith(f"upgrade route transform: the cheapest route reaching {now} for 1,000,000 items (")
    c = choose_route(TABLE, items=ITEMS, min_map=0.70, bar=now)
    assert c.line.startswith(f"upgrade route backfill: no route reaches {now}; this one serves the most (")
    assert "upgrade.min_map 0.5900 for" in choose_route(TABLE, items=ITEMS, min_map=0.59).line
    with pytest.raises(ValueError, match="route auto takes the cheapest route reaching a bar: pass min_map"):
        choose_route(TABLE, items=ITEMS, min_map=None)  # a caller's mistake: bctflow resolves the bar first


def test_refusals_are_one_line():
    with pytest.raises(ConfigError) as err:
        choose_route(TABLE, items=ITEMS, min_map=0.5, route="query")
    assert str(err.value) == "upgrade route 'query' is not a route; use auto or one of " + ", ".join(ROUTES)
    with pytest.raises(ConfigError) as err:
        choose_route([RouteEvidence("adapter", None, 0.0)], items=1, min_map=0.5, route="adapter")
    assert str(err.value).startswith("upgrade.route adapter was not measured for this generation (adapter not")
    with pytest.raises(ConfigError) as err:
        choose_route([RouteEvidence("adapter", None, 0.0)], items=1, min_map=0.5)
    assert str(err.value).startswith("no upgrade route was measured")
    assert check_route("auto") == "auto" and check_route("backfill") == "backfill"
