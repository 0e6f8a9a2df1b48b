"""The lineage's bridges (registry/lineage.py, revision 0008) on SQLite and a real PostgreSQL: each fit of a
(from, to, role) is its next version; the chain of newest links carries a generation's vectors across several
generations; an unknown generation or role, and a chain that breaks, are one line each with nothing written."""

from __future__ import annotations

import pytest

from components.errors import LineageError
from registry.lineage import LineageDB
from registry.records import BridgeRecord, GenerationBundle, RouteChoiceRecord
from tests.helpers import generation_record


def _store(url: str) -> LineageDB:
    store = LineageDB(url)
    for g in (0, 1, 2, 3):
        store.commit_generation(GenerationBundle(generation_record(g, parent=g - 1 if g else None)))
    return store


def _bridge(a: int, b: int, role: str = "adapter", kind: str = "procrustes", name: str = "x") -> BridgeRecord:
    return BridgeRecord(a, b, role, kind, f"/bridges/{name}.npz", name[0] * 64, 200, 0.1)


def test_each_fit_is_a_version_and_the_chain_follows_the_newest_links(db_url: str):
    store = _store(db_url)
    assert store.newest_bridge_id() == 0  # none yet
    first = store.record_bridge(_bridge(1, 0, name="a"))
    store.record_bridge(_bridge(2, 1, kind="low_rank", name="b"))
    again = store.record_bridge(_bridge(1, 0, kind="residual_mlp", name="c"))  # a refit of g1 → g0
    assert (first.version, again.version) == (1, 2) and again.path == "/bridges/c.npz"
    chain = store.bridge_chain(2, 0, "adapter")  # g2's queries reach g0's gallery: g2 → g1 → g0
    assert [(r.from_generation_id, r.to_generation_id, r.kind, r.version) for r in chain] == [
        (2, 1, "low_rank", 1),
        (1, 0, "residual_mlp", 2),
    ]
    # transforms carry stored vectors forward; the fewest links win over a longer way round
    for a, b in ((0, 1), (1, 2), (2, 3), (0, 2)):
        store.record_bridge(_bridge(a, b, role="transform", name=f"t{a}{b}"))
    links = [(r.from_generation_id, r.to_generation_id) for r in store.bridge_chain(0, 3, "transform")]
    assert links == [(0, 2), (2, 3)]
    assert store.bridge_chain(1, 1, "adapter") == []  # a generation's own space: no link
    assert len(store.bridges()) == 7
    store.close()


def test_unknown_generations_roles_and_broken_chains_are_one_line_and_write_nothing(db_url: str):
    store = _store(db_url)
    store.record_bridge(_bridge(1, 0))
    with pytest.raises(LineageError, match=r"^the adapter bridge g7→g0 names generation 7, which this lineage does"):
        store.record_bridge(_bridge(7, 0))
    with pytest.raises(LineageError, match=r"^a bridge's role is one of adapter, transform, not 'query'$"):
        store.record_bridge(_bridge(2, 1, role="query"))
    with pytest.raises(LineageError, match=r"^no chain of adapter bridges carries generation 3's vectors into .*g3"):
        store.bridge_chain(3, 0, "adapter")
    assert [(r.from_generation_id, r.to_generation_id) for r in store.bridges()] == [(1, 0)]
    assert store.newest_bridge_id() == store.bridges()[-1].id
    store.close()
    with pytest.raises(LineageError, match="read-only"):
        LineageDB(db_url, readonly=True).record_bridge(_bridge(2, 1))


def test_route_choices_are_recorded_oldest_first_and_refused_in_one_line(db_url: str):
    """Revision 0009: the route a rule took for a generation, with every route's measurement (JSON round trip); a
    route that is not one, or a generation the lineage does not hold, is one line with nothing written."""
    store = _store(db_url)
    evidence = [{"route": "adapter", "served_map": 0.5, "seconds_per_item": 0.0, "query_us": 1.5}]
    store.record_route_choice(RouteChoiceRecord(2, 1, "adapter", "auto", 0.4, True, "upgrade route adapter", evidence))
    store.record_route_choice(RouteChoiceRecord(2, 1, "backfill", "backfill", None, True, "set by the user", []))
    with pytest.raises(LineageError, match=r"^an upgrade route is one of compatible, adapter, transform, backfill, "):
        store.record_route_choice(RouteChoiceRecord(2, 1, "query", "auto", 0.4, True, "x", []))
    with pytest.raises(LineageError, match=r"^the adapter route of generation 9 names generation 9, which this lin"):
        store.record_route_choice(RouteChoiceRecord(9, 1, "adapter", "auto", 0.4, True, "x", []))
    rows = store.route_choices()
    assert [(r.generation_id, r.route, r.rule, r.min_map, r.met_bar) for r in rows] == [
        (2, "adapter", "auto", 0.4, True),
        (2, "backfill", "backfill", None, True),
    ]
    assert rows[0].evidence == evidence and rows[0].line == "upgrade route adapter"
    store.close()
