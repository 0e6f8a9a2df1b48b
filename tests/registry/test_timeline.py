"""The lineage timeline (registry/timeline.py, LineageDB.timeline): generations and backfills in the order they
happened, ζ restarts, the production and live generations, and the generation being registered at its end."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import update

from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Timeline
from registry import orm
from registry.lineage import LineageDB
from registry.records import BackfillRecord, DecisionRecord, GenerationBundle, PointerRecord
from tests.helpers import generation_record, lineage_story


def _backfill(store: LineageDB, to: int, kind: str, reembedded: int, zeta: float | None, retire: list[int]) -> None:
    restarted = zeta is not None
    event = BackfillRecord(
        0, to, kind, 1.0, "all", 539, reembedded, f"/live/{to}", restarted, {}, datetime.now(UTC), 7.0
    )
    store.record_backfill(event, PointerRecord(to, f"/live/{to}", kind, f"/m/{to}", zeta, [to]), retire)


def test_the_steps_are_the_lineage_in_the_order_it_happened(tmp_path: Path):
    with lineage_story(tmp_path / "lineage.db") as store:
        timeline = store.timeline("map")
    assert [type(s).__name__ for s in timeline.steps] == [
        "GenerationStep",
        "GenerationStep",
        "BackfillStep",
        "GenerationStep",
    ]
    g0, g1, backfill, g2 = timeline.steps
    assert isinstance(g1, GenerationStep) and (g1.parent_id, g1.compatible, g1.zeta, g1.version) == (0, True, 1.2, "2")
    assert (g1.cross, g1.old_old) == (0.6, 0.5)  # its queries on g0's gallery vs g0's own, on the decision metric
    assert isinstance(g0, GenerationStep) and g0.promoted and not g0.forced and g0.parent_id is None
    assert backfill == BackfillStep(
        1, to_gen=1, kind="full", reembedded=539, total=539, duration_s=1.0, zeta_restart=1.0
    )
    assert isinstance(g2, GenerationStep) and g2.compatible is False and g2.forced and g2.promoted
    assert (timeline.production, timeline.live) == (2, 1)  # g2 forced into production; g1's backfill filled the gallery
    assert timeline.generations == (g0, g1, g2) and timeline.backfills == (backfill,)
    # without a metric the steps carry no cross / old-old values; the rest is the same
    with LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}", readonly=True) as store:
        bare = store.timeline()
    assert bare.metric is None and (bare.generations[1].cross, bare.generations[1].old_old) == (None, None)
    assert [type(s) for s in bare.steps] == [type(s) for s in timeline.steps] and bare.backfills == (backfill,)


def test_each_generation_carries_its_backfill_decision_in_words_and_in_short(tmp_path: Path):
    """What the picture and the version's state line read: the decision, its reasons, and each failed check's short
    text (a check recorded before rules wrote one: its rule and numbers)."""
    clip = {"rule": "clip_fraction_max", "value": 0.99, "threshold": 0.95, "passed": False, "short": "clip 99% > 95%"}
    old = {"rule": "zeta_ceiling", "value": 1.4, "threshold": 1.3, "passed": False}
    ok = {"rule": "compatibility", "value": 0.6, "threshold": 0.5, "passed": True, "short": "cross 0.600 > old 0.500"}
    with LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}") as store:
        store.commit_generation(
            GenerationBundle(
                generation_record(0, None, promoted=True),
                decision=DecisionRecord(False, [], [], None),
                pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]),
                promotion=(None, "generation 0"),
            )
        )
        g1 = generation_record(1, 0, mlflow_version="2", promoted=False)
        g1.compatible_with_live = True
        reasons = ["99% of gallery embeddings sit on the clip radius > 95%", "clip radius ζ 1.40 > ceiling 1.30"]
        store.commit_generation(GenerationBundle(g1, decision=DecisionRecord(True, reasons, [ok, clip, old], 0)))
        timeline = store.timeline()
    g0, g1_step = timeline.generations
    assert (g0.backfill_required, g0.backfill_reasons, g0.backfill_short) == (False, (), ())
    assert g1_step.backfill_required and g1_step.backfill_reasons == tuple(reasons)
    assert g1_step.backfill_short == ("clip 99% > 95%", "zeta_ceiling 1.4 vs 1.3")
    assert timeline.state(1).startswith("backfill required, not promoted: 99% of gallery embeddings")


def test_generations_and_backfills_interleave_by_time_not_by_id(tmp_path: Path):
    """Rows written in one order, stamped in another: the timeline follows the stamps (at one time a generation comes
    before a backfill), and each backfill keeps the ζ its pointer restarted the gallery at."""
    store = LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}")
    for gid in range(4):
        store.commit_generation(
            GenerationBundle(
                generation_record(gid, gid - 1 if gid else None, mlflow_version=str(gid + 1)),
                pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]) if gid == 0 else None,
            )
        )
    _backfill(store, 1, "full", 539, 1.0, [0])  # ζ restarts at 1.0
    _backfill(store, 3, "partial", 100, None, [])  # no restart
    hour = {("g", 0): 1, ("g", 1): 2, ("b", 1): 3, ("g", 2): 4, ("g", 3): 5, ("b", 2): 5}  # g3 and backfill 2 tie
    with store.transaction() as s:
        for (kind, key), h in hour.items():
            table = orm.Generation if kind == "g" else orm.BackfillEvent
            column = "created_at" if kind == "g" else "finished_at"
            s.execute(update(table).where(table.id == key).values({column: datetime(2025, 1, 1, h)}))
    with store:
        timeline = store.timeline()
    order = [f"g{s.gen_id}" if isinstance(s, GenerationStep) else f"b{s.event_id}" for s in timeline.steps]
    assert order == ["g0", "g1", "b1", "g2", "g3", "b2"]
    full, partial = timeline.backfills
    assert (full.to_gen, full.kind, full.zeta_restart, full.duration_s) == (1, "full", 1.0, 7.0)
    assert (partial.to_gen, partial.reembedded, partial.total, partial.zeta_restart) == (3, 100, 539, None)
    assert timeline.live == 3 and timeline.production is None  # the newest pointer; nothing was promoted


def test_the_generation_being_registered_goes_last_as_pending():
    committed = Timeline(
        (GenerationStep(0, "g0", "independent", 1.0, "1", None, None, promoted=True),), production=0, live=0
    )
    new = GenerationStep(1, "g1", "hbct", 1.2, None, 0, True, cross=0.6, old_old=0.5, promoted=True)
    pending = committed.with_pending(new)
    assert pending.steps[:-1] == committed.steps and pending.steps[-1].pending and pending.steps[-1].gen_id == 1
    assert (pending.production, pending.live) == (1, 0)  # passed the gate: production; the gallery stays g0's
    refused = committed.with_pending(GenerationStep(1, "g1", "hbct", 1.2, None, 0, False))
    assert (refused.production, refused.live) == (0, 0)
    first = Timeline((), production=None, live=None, metric="map").with_pending(new)
    assert (first.production, first.live, first.metric) == (1, 1, "map")  # generation 0 embeds the live gallery
    assert committed.steps == (GenerationStep(0, "g0", "independent", 1.0, "1", None, None, promoted=True),)
