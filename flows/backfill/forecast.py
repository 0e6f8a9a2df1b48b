"""A backfill's plan, measured before it runs (``bctflow backfill --plan``; shown before every backfill, kept in its
Prefect artifact and beside the actual in the lineage's backfill event): how long it takes and what each 10% of a
partial backfill buys. Nothing is re-embedded into the workspace and nothing is written there.

* Time. Each gallery's embedding is measured on a sample of the very items the backfill re-embeds (the first
  ``backfill.plan_sample`` of its selection) through the backfill's own pipeline
  (:func:`~flows.gallery.pipeline.embed_gallery`: the target's checkpoint, the gallery's DataLoader with its
  workers, parts written) into a temporary folder outside the workspace. Everything up to the first batch — the
  checkpoint's digest, loading the model, starting the loader's workers, that batch — is the fixed cost; the rate is
  the items after it over their seconds. A gallery's embedding takes fixed + the rest ÷ rate (+ the throttle after
  each part). Its index build takes as long as the live version's own build of it took when that used the same
  index type over as many items (its manifest's ``build_seconds``); otherwise it is not estimated and the line says
  so. The whole command: the seconds before the plan (the command's start-up and planning, measured), the plan's
  own measurement (measured), the embedding, and the rest — Prefect's start-up, the flow's start, then the publish
  step (assembly, index builds, its checks and metrics) up to the switch — as the workspace's newest backfill run
  that timed them took it (:func:`run_seconds`, kept in its lineage event; the publish part scaled to this
  backfill's items). On a database store the publish checks are most of a backfill: a 10% partial backfill of a
  100k Milvus Lite corpus took 333 s, 3.5 s of it embedding. Without an earlier timed run the rest is the index
  builds only, and the line says what is left out.
* Quality. The served mAP@R (:func:`components.evaluation.served.served_maps`, as the partial-backfill benchmark
  measures it, under params ``serve.merge``) of the labelled evaluation split at each 10% of a partial backfill in
  the backfill's order (a full backfill's: ``backfill.order``): the live evaluation gallery with the first f of its
  items in that order replaced by the target generation's own embeddings of them (its generation folder's
  evaluation gallery, embedded by the same checkpoint), queried by the target's queries. 100% is the target's own
  gallery — rescaled into the ζ₀ ball where a full backfill restarts ζ, which is the same embedding up to the scale.
"""

from __future__ import annotations

import atexit
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.evaluation.served import MERGES, backfilled, served_maps
from components.indexing.gallery import GalleryEmbeddings
from components.io import atomic_write_text
from components.models.checkpoint import read_checkpoint
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.reembedding import gallery_source, live_store, own_evaluation, selected_positions
from flows.backfill.transform import transform_rate
from flows.gallery.pipeline import embed_gallery

__all__ = [
    "COMMAND_FILE",
    "RUN_KEYS",
    "STEPS",
    "BackfillForecast",
    "GalleryForecast",
    "forecast_backfill",
    "forecast_lines",
    "forecast_metrics",
    "record_command",
    "run_seconds",
]

#: the fractions of a partial backfill the plan predicts the served mAP at
STEPS = tuple(round(i / 10, 1) for i in range(11))
_WORDS = {"evaluation": "evaluation gallery", "corpus": "serving corpus"}


class GalleryForecast(BaseModel):
    """One gallery's predicted embedding: ``items`` to re-embed, the ``sample`` measured, its ``fixed_s`` (up to
    the first batch, ``first`` items) and ``items_per_s`` after it; the index build as the live one took
    (``index_s``, None: not estimated, ``index_note`` says why)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    items: int
    sample: int
    first: int
    fixed_s: float
    items_per_s: float
    embed_s: float
    index_s: float | None
    index_note: str


class BackfillForecast(BaseModel):
    """The plan: each gallery's predicted time, the served mAP at each of ``fractions`` (None: a partial backfill
    cannot mix the target's vectors into the live gallery) in ``order`` under ``merge``, and the smallest step
    reaching ``target_map``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    galleries: tuple[GalleryForecast, ...]
    #: processes embedding at once (the backfill runs in one)
    workers: int = 1
    order: str
    merge: str
    fractions: tuple[float, ...]
    served_map: tuple[float | None, ...]
    #: the served mAP at this backfill's own fraction (beside the actual in the lineage)
    own_map: float | None
    target_map: float | None
    reaches: float | None
    #: the command's seconds before the plan (its start-up and planning; 0: not known, the plan made in a flow)
    before_s: float = 0.0
    #: the plan's own measurement (the sample embeddings and the served-mAP curve), and when it ended (epoch seconds)
    plan_s: float = 0.0
    planned_at: float = 0.0
    #: Prefect's start-up and the flow's start, then the publish step to the switch, as an earlier run took them
    #: (None: no earlier backfill run of this workspace timed them; ``rest_note`` says which, or why not)
    rest_s: float | None = None
    rest_note: str = ""

    @property
    def embed_s(self) -> float:
        return sum(g.embed_s for g in self.galleries)

    @property
    def work_s(self) -> float:
        """Embedding plus the index builds that could be estimated: the work the workers do."""
        return self.embed_s + sum(g.index_s or 0.0 for g in self.galleries)

    @property
    def predicted_s(self) -> float:
        """The whole command: before the plan, the plan, the embedding, and the rest as an earlier run took it (its
        publish step holds the index builds); without one, the index builds that could be estimated."""
        rest = self.rest_s if self.rest_s is not None else self.work_s - self.embed_s
        return self.before_s + self.plan_s + self.embed_s + rest

    @property
    def items_per_s(self) -> float:
        """The measured (steady) rate over every gallery's items: their sum over the seconds each gallery's rate
        gives them."""
        return sum(g.items for g in self.galleries) / max(sum(g.items / g.items_per_s for g in self.galleries), 1e-9)

    @property
    def worker_hours(self) -> float:
        return self.work_s * self.workers / 3600.0


def _measure(plan: BackfillPlan, gallery: BackfillGallery) -> GalleryForecast:
    """Embed the first ``backfill.plan_sample`` selected items of ``gallery`` the way the backfill will, into a
    temporary folder; time the first batch (fixed cost) and the rest (rate)."""
    p = plan.params
    positions = selected_positions(plan, gallery)
    if not len(positions):  # nothing to embed (an ingest carries its evaluation gallery as it is)
        return _forecast(plan, gallery, 0, 0, 0.0, 0, 1.0, 0)
    sample = positions[: p.backfill.plan_sample]
    stamps: list[tuple[float, int]] = []
    if plan.bridge is not None:  # a gallery transform: the live rows through the bridge, timed the same way
        sample_n = len(sample)
        fixed, warm, rate = transform_rate(plan.bridge, live_store(plan, gallery), sample_n, p.train.eval_batch_size)
        return _forecast(plan, gallery, len(positions), sample_n, fixed, warm, rate, warm)
    with tempfile.TemporaryDirectory(prefix="bctflow-plan-") as tmp:
        t0 = time.perf_counter()
        embed_gallery(
            p,
            gallery_source(plan, gallery),
            Path(plan.target_checkpoint),  # a ζ-restarting backfill embeds with its rescaled copy: the same cost
            Path(tmp) / "gallery",
            generation=plan.target,
            positions=sample,
            on_batch=lambda n: stamps.append((time.perf_counter(), n)),
            crash_points=False,  # a measurement: the backfill's crash points lie in its own embedding
        )
    (t1, first), rest = stamps[0], stamps[1:]
    if rest:  # the fixed cost up to the first batch (warm-up), the steady rate after it
        fixed, warm, rate = t1 - t0, first, sum(n for _, n in rest) / max(rest[-1][0] - t1, 1e-9)
    else:  # a sample of one batch: its own rate, no fixed cost apart
        fixed, warm, rate = 0.0, 0, first / max(t1 - t0, 1e-9)
    return _forecast(plan, gallery, len(positions), len(sample), fixed, warm, rate, first)


def _forecast(plan: BackfillPlan, gallery: BackfillGallery, items: int, sample: int, fixed: float, warm: int,
              rate: float, first: int) -> GalleryForecast:  # fmt: skip
    """``items`` of ``gallery`` at ``rate`` after ``fixed`` s for the first ``warm`` (``first``: the first batch)."""
    parts = (items + plan.chunk_size - 1) // plan.chunk_size
    embed = fixed + (items - warm) / rate + plan.throttle_s * parts
    index_s, note = _index_estimate(plan, gallery)
    return GalleryForecast(
        name=gallery.name,
        items=items,
        sample=sample,
        first=first,
        fixed_s=fixed,
        items_per_s=rate,
        embed_s=embed,
        index_s=index_s,
        index_note=note,
    )


def _index_estimate(plan: BackfillPlan, gallery: BackfillGallery) -> tuple[float | None, str]:
    """The live version's own build time of ``gallery``'s index, when it built the params' index type over as many
    items as the backfill's will hold; else (None, why)."""
    live = plan.live_version
    index = live.serving().index if gallery.corpus else Path(plan.source_index)
    try:
        m = json.loads((index / "manifest.json").read_text())
    except (OSError, ValueError):
        return None, "index build not estimated: the live index has no readable manifest"
    kind, count, seconds = m.get("index_type", "flat"), m.get("count"), m.get("build_seconds")
    if seconds is None or kind != plan.params.index.type or count != gallery.total:
        want = f"{plan.params.index.type} over {gallery.total}"
        return None, f"index build not estimated: the live index is {kind} over {count} items, this one {want}"
    return float(seconds), f"as the live {kind} index over {count} items took"


def _restarted(plan: BackfillPlan, new: GalleryEmbeddings) -> GalleryEmbeddings:
    """``new`` as a full backfill serves it: rescaled into the ζ₀ ball (z·ζ₀/ζ_g) where params restart ζ — what the
    rescaled checkpoint embeds (its bound and its tangent scale both scale by ζ₀/ζ_g)."""
    if not plan.params.backfill.restart_zeta or not new.retrieval_space.radius_encodes_confidence:
        return new
    zeta = read_checkpoint(Path(plan.target_checkpoint)).spec.zeta
    return new if zeta is None else replace(new, z=(new.z * (plan.params.geometry.zeta0 / zeta)).astype(new.z.dtype))


def _curve(plan: BackfillPlan, fractions: tuple[float, ...]) -> tuple[str, list[float | None]]:
    """(order, the served mAP at each of ``fractions``) over the labelled evaluation split."""
    p = plan.params
    if plan.kind == "ingest":  # new items added, nothing re-embedded: no served curve to forecast
        return plan.order, [None for _ in fractions]
    merge = (p.serve.merge,)
    key = MERGES[p.serve.merge]
    current = live_store(plan, plan.evaluation)
    old, new = current.embeddings(), own_evaluation(plan)
    if plan.bridge is not None:  # all or nothing: the target's queries on the live gallery carried by the bridge
        carried = plan.bridge.load().map_gallery(old)
        return "all", [served_maps(old, new, carried, np.arange(len(old)), merge)[key] if f == 1.0 else None
                       for f in fractions]  # fmt: skip
    whole = _restarted(plan, new)
    full = served_maps(whole, whole, whole, np.arange(len(whole)), merge)[key]
    order = plan.order if plan.kind == "partial" else p.backfill.order
    if new.incompatibility(old) is not None or not np.array_equal(old.ids, new.ids):
        return order, [full if f == 1.0 else None for f in fractions]  # one space only: nothing to mix
    if order == "uncertainty" and not old.retrieval_space.radius_encodes_confidence:
        order = "random"  # no hyperbolic uncertainty to order by
    ranked = current.selection(order, plan.seed)
    out: list[float | None] = []
    for f in fractions:
        if f == 1.0:
            out.append(full)
            continue
        pos = np.sort(ranked[: round(f * len(old))])
        out.append(served_maps(old, new, backfilled(old, new, pos), pos, merge)[key])
    return order, out


def forecast_backfill(plan: BackfillPlan, started: float | None = None) -> BackfillForecast:
    """Measure ``plan``'s plan: each gallery's embedding rate on a sample, the served mAP at each 10% (and at the
    plan's own fraction), the rest of the command from the newest timed run. ``started``: when the command started
    (epoch seconds; None: not known). Writes nothing in the workspace."""
    t0 = time.time()
    galleries = tuple(_measure(plan, g) for g in plan.galleries)
    fractions = tuple(sorted({*STEPS, round(plan.fraction, 4)}))
    order, maps = _curve(plan, fractions)
    rest, note = _rest(plan)
    target = plan.params.backfill.target_map
    reached = [
        f for f, m in zip(fractions, maps) if f in STEPS and m is not None and target is not None and m >= target
    ]
    return BackfillForecast(
        galleries=galleries,
        order=order,
        merge=plan.params.serve.merge,
        fractions=fractions,
        served_map=tuple(maps),
        own_map=maps[fractions.index(round(plan.fraction, 4))],
        target_map=target,
        reaches=min(reached, default=None),
        before_s=max(0.0, t0 - started) if started is not None else 0.0,
        plan_s=(end := time.time()) - t0,
        planned_at=end,
        rest_s=rest,
        rest_note=note,
    )


def _rest(plan: BackfillPlan) -> tuple[float | None, str]:
    """(the rest of the command, what it is from) as the newest backfill run of the workspace that timed it took
    it: its Prefect start-up and flow start as they were, its publish step scaled to this backfill's items."""
    with plan.workspace.lineage(plan.params, readonly=True) as store:
        timed = [b for b in store.backfills() if set(RUN_KEYS) <= set(b.metrics or {})]
    if not timed:
        return None, "Prefect's start-up and the publish checks not included: no earlier backfill run timed them"
    event = timed[-1]
    m = event.metrics
    items = sum(g.total for g in plan.galleries)
    publish_s = m["run_publish_s"] * items / max(m["run_items"], 1.0)
    scaled = "" if items == m["run_items"] else f", scaled from its {m['run_items']:.0f} items"
    # the switch and the command's end (Prefect's flow run closed, the summary), where that command wrote its seconds
    command = plan.workspace.finished_backfill_dir(int(event.id)) / COMMAND_FILE
    timed_s = m.get("run_before_s", 0.0) + m["run_startup_s"] + m["run_embed_s"] + m["run_publish_s"]
    end_s = max(0.0, json.loads(command.read_text())["seconds"] - timed_s) if command.is_file() else 0.0
    return m["run_startup_s"] + publish_s + end_s, (
        f"Prefect's start-up {m['run_startup_s']:.1f} s, the publish step {publish_s:.1f} s and the switch to the "
        f"command's end {end_s:.1f} s as backfill {event.id}'s run took them{scaled}"
    )


#: in a finished backfill's folder: its command's wall seconds (:func:`record_command`)
COMMAND_FILE = "command.json"


def record_command(plan: BackfillPlan, event_id: int, started: float) -> None:
    """Keep the wall seconds of the command that finished backfill ``event_id`` (``started``: its start, epoch
    seconds) in its folder: the next plan adds what followed the publish step (the switch, the command's end).
    Written now, and again at the process's exit, after Prefect's temporary server stopped (its stop and the last
    log and event sends took 4 s of a 22 s tiny backfill): this module's exit hook was registered at its import,
    before the server started, and exit hooks run last-registered first."""
    done = plan.workspace.finished_backfill_dir(event_id)
    if done.is_dir():
        _AT_EXIT[:] = [(done / COMMAND_FILE, started)]
        _write_command()


#: (the file, the command's start) that :func:`_write_command` writes at the process's exit
_AT_EXIT: list[tuple[Path, float]] = []


@atexit.register
def _write_command() -> None:
    for path, started in _AT_EXIT:
        atomic_write_text(path, json.dumps({"seconds": time.time() - started}))


#: what a backfill run's lineage event keeps of its own seconds (:func:`run_seconds`)
RUN_KEYS = ("run_startup_s", "run_embed_s", "run_publish_s", "run_items")


def run_seconds(plan: BackfillPlan, fc: BackfillForecast, embedding: float, embedded: float) -> dict[str, float]:
    """This run's seconds (epoch ``embedding`` and ``embedded``: its embedding's start and end) as its lineage event
    keeps them for the next plan: ``run_startup_s`` from the end of the plan ``fc`` to the embedding (Prefect's
    start-up, the flow's start), ``run_embed_s``, ``run_publish_s`` from the embedding's end to now (the publish
    step, just before the switch), ``run_items`` (every gallery's items); beside the prediction
    (:func:`forecast_metrics`)."""
    now = time.time()
    return {
        "run_before_s": fc.before_s + fc.plan_s,
        "run_startup_s": max(0.0, embedding - fc.planned_at),
        "run_embed_s": embedded - embedding,
        "run_publish_s": now - embedded,
        "run_items": float(sum(g.total for g in plan.galleries)),
    }


def _pct(f: float) -> str:
    return f"{f * 100:g}%"


def forecast_lines(plan: BackfillPlan, fc: BackfillForecast) -> list[str]:
    """The plan in a few lines: items, predicted time and worker-hours, the served mAP at each 10%, the target."""
    lines = [f"backfill plan: generation {plan.target} ({plan.kind}, fraction {plan.fraction:g})"]
    for g in fc.galleries:
        index = f"index build {g.index_s:.1f} s ({g.index_note})" if g.index_s is not None else g.index_note
        lines.append(
            f"  {_WORDS[g.name]}: {g.items} items to re-embed at {g.items_per_s:,.0f} items/s (measured on {g.sample}, "
            f"{g.fixed_s:.1f} s up to the first batch of {g.first}) → {g.embed_s:.1f} s; {index}"
        )
    rest = f"the rest {fc.rest_s:.1f} s: {fc.rest_note}" if fc.rest_s is not None else f"index builds; {fc.rest_note}"
    lines.append(
        f"  predicted wall time {fc.predicted_s:.1f} s (embedding {fc.embed_s:.1f} s + {rest}; before the plan "
        f"{fc.before_s:.1f} s, the plan {fc.plan_s:.1f} s), {fc.worker_hours:.4f} worker-hours on {fc.workers} worker"
    )
    steps = [(f, m) for f, m in zip(fc.fractions, fc.served_map) if f in STEPS]
    lines.append(
        f"  predicted served mAP@R ({fc.order} order, serve.merge {fc.merge}): "
        + " · ".join(f"{_pct(f)} {'n/a' if m is None else f'{m:.3f}'}" for f, m in steps)
    )
    if None in fc.served_map:
        lines.append(f"  (generation {plan.target}'s vectors cannot share an index with the live ones: 100% only)")
    if plan.kind == "partial" and plan.fraction not in STEPS:
        lines.append(f"  at this backfill's {_pct(plan.fraction)}: {fc.own_map:.3f}")
    if fc.target_map is not None:
        best = max((m for m in fc.served_map if m is not None), default=None)
        lines.append(
            f"  backfill.target_map {fc.target_map:g}: reached at {_pct(fc.reaches)}"
            if fc.reaches is not None
            else f"  backfill.target_map {fc.target_map:g}: not reached (best predicted {best:.3f})"
        )
    return lines


def forecast_metrics(fc: BackfillForecast) -> dict[str, float]:
    """The prediction as the lineage's backfill event keeps it, beside the actual (:func:`run_seconds`; the event's
    ``duration_s`` spans every run of a resumed backfill)."""
    out = {
        "plan_predicted_s": fc.predicted_s,
        "plan_embed_predicted_s": fc.embed_s,
        "plan_items_per_s": fc.items_per_s,
    }
    return out | ({"plan_predicted_map": fc.own_map} if fc.own_map is not None else {})
