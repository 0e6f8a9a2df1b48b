"""A night of the lifecycle: after the nightly run's generation commits, the policy decides and the decision is
carried out (docs/design.md §7.18) — the ``lifecycle-night`` Prefect flow, a subflow of ``nightly-retrain``.

Crash-consistent like a backfill. A night is one row of the lineage's ``nights`` (registry/night_ledger.py), keyed
by its name, written in three transactions:

1. decide — last night's outcome (today's served mAP, measured now) recorded on last night's row; the night's
   options and forecasts measured (:mod:`flows.lifecycle.options`), the policy's choice recorded (``decided``);
2. act — ``acting``, then the action through the commands' own code (:mod:`flows.lifecycle.act`);
3. done — what it cost and what it made, and the re-embedding it carries over (``done``).

A night found ``decided`` or ``acting`` never decides again: it runs its recorded action (each resumes or is
recognised as done), so a kill anywhere ends, when the same night runs again, in the lineage an uninterrupted night
gives; a night found ``done`` does nothing. The decision, its forecast and the action are tagged on the night's
generation's MLflow run (production's, on a night that trained nothing), and the outcome the night after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from components.faults import crash_point
from flows.lifecycle.act import Acted, act
from flows.lifecycle.options import night_options
from flows.lifecycle.policies import Carry, Choice, Night, Option, create_policy
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.orm import Night as NightRow
from registry.records import NightRecord

__all__ = ["lifecycle_night", "night_summary"]


def _carry(row: NightRow | None) -> Carry | None:
    """The re-embedding last night carries over, if it is not finished."""
    if row is None or not row.carry:
        return None
    c = row.carry
    return Carry(int(c["target"]), str(c.get("mode", "partial")), float(c.get("done", 0.0)),
                 float(c.get("goal", 1.0)), int(c.get("left", 0)))  # fmt: skip


def _carry_after(choice: Choice, carried: Carry | None) -> dict[str, Any] | None:
    """What the chosen action carries to the next nights, as decided: a partial toward a larger goal (the budget's
    note ``carry:g:goal``), a full re-embedding begun or continued (its ``left`` is the action's to tell), or the
    carry it leaves untouched."""
    o = choice.option
    if o.action in ("begin", "continue") and (o.action == "begin" or (carried and carried.mode == "full")):
        return Carry(int(o.generation or 0), "full", left=-1).as_dict()  # the action tells what is left
    if o.note.startswith("carry:") and o.fraction is not None:
        _, target, goal = o.note.split(":")
        return Carry(int(target), "partial", o.fraction, float(goal)).as_dict() if o.fraction < float(goal) else None
    if carried is not None and o.action in ("keep", "promote", "adapter"):
        return carried.as_dict()  # untouched: it goes on another night
    return None


def _option_row(x: Option, *, chosen: bool) -> dict[str, Any]:
    row = {"action": x.action, "generation": x.generation, "forecast_map": x.forecast_map, "items": x.items,
           "seconds": x.seconds, "fraction": x.fraction}  # fmt: skip
    return row | {"chosen": True} if chosen else row


def _record(choice: Choice, night: Night, key: str, policy: str, live: int, production: int | None,
            checks: list[dict[str, Any]], carried: Carry | None) -> NightRecord:  # fmt: skip
    o = choice.option
    return NightRecord(
        night=key,
        policy=policy,
        generation_id=night.generation,
        live_generation_id=live,
        production_id=production,
        action=o.action,
        fraction=o.fraction,
        target_generation_id=o.generation,
        reason=choice.reason,
        forecast_map=o.forecast_map,
        served_before=night.keep().forecast_map,
        # every option considered, the chosen one marked (a policy may make one of its own: begin) — what the action
        # reads its planned items from
        options=[_option_row(x, chosen=x is o) for x in night.options]
        + ([] if any(x is o for x in night.options) else [_option_row(o, chosen=True)]),
        checks=checks,
        carry=_carry_after(choice, carried),
    )


@task(name="decide-night", cache_policy=NO_CACHE)
def decide_task(params: Params, home: str, key: str, generation: int | None) -> NightRow:
    """The night's row: decided now, or as an earlier attempt of this night decided it."""
    ws = Workspace(Path(home))
    policy = params.lifecycle.policy
    assert policy is not None
    with ws.lineage(params) as store:
        found = store.nights.night(key)
        if found is not None:
            return found
        last = store.nights.last()
        carried = _carry(last)
        night = night_options(params, ws, store, night=len(store.nights.all()), generation=generation,
                              carry=carried, routes=policy == "budget")  # fmt: skip
        if last is not None and last.outcome_map is None:  # today's served mAP is what last night's action gave
            store.nights.outcome(last.night, night.keep().forecast_map or 0.0)
        choice = create_policy(policy)(night, params.lifecycle)
        ptr = store.live_pointer()
        assert ptr is not None
        decision = store.decision(generation) if generation is not None else None
        checks = list(decision.checks) if decision is not None else []
        row = store.nights.decide(
            _record(choice, night, key, policy, ptr.generation_id, store.production_generation_id(), checks, carried)
        )
    get_run_logger().info("night %s (%s): %s — %s", key, policy, row.action, row.reason)
    return row


@task(name="act-night", cache_policy=NO_CACHE)
def act_task(params: Params, home: str, row: NightRow) -> Acted:
    ws = Workspace(Path(home))
    with ws.lineage(params) as store:
        store.nights.acting(row.night)
    crash_point("night.acting")
    return act(params, ws, row)


@task(name="finish-night", cache_policy=NO_CACHE)
def finish_task(params: Params, home: str, row: NightRow, done: Acted) -> NightRow:
    """The night done: its compute — the night's generation's training seconds and the action's — recorded."""
    ws = Workspace(Path(home))
    with ws.lineage(params) as store:
        g = store.generation(row.generation_id) if row.generation_id is not None else None
        trained_s = float(g.train_seconds or 0.0) if g is not None else 0.0
        carry = dict(row.carry) if row.carry else None
        if carry is not None and carry.get("mode") == "full" and carry.get("left") == -1:
            carry = None if not done.left else carry | {"left": done.left}  # published, or what is left of it
        return store.nights.done(row.night, items=done.items, compute_s=trained_s + done.seconds,
                                 backfill_id=done.backfill_id, bridge_id=done.bridge_id, carry=carry)  # fmt: skip


def night_summary(row: NightRow) -> dict[str, Any]:
    """A night's row as the nightly run returns it (and the benchmark reads it)."""
    return {
        "night": row.night,
        "policy": row.policy,
        "generation": row.generation_id,
        "action": row.action,
        "fraction": row.fraction,
        "target": row.target_generation_id,
        "reason": row.reason,
        "forecast_map": row.forecast_map,
        "served_before": row.served_before,
        "items": row.items,
        "compute_s": row.compute_s,
        "state": row.state,
        "backfill": row.backfill_id,
        "carry": row.carry,
    }


@flow(name="lifecycle-night", log_prints=True)
def lifecycle_night(params: Params, home: str, key: str, generation: int | None = None) -> dict[str, Any]:
    """Decide night ``key`` (its new generation: ``generation``) under params ``lifecycle.policy`` and carry the
    decision out; a night already done changes nothing."""
    row = decide_task(params, home, key, generation)
    if row.state == "done":
        get_run_logger().info("night %s was done already: nothing to do", key)
        return night_summary(row)
    done = act_task(params, home, row)
    row = finish_task(params, home, row, done)
    _tag(params, home, row)
    return night_summary(row)


def _tag(params: Params, home: str, row: NightRow) -> None:
    """The night's decision on its generation's MLflow run (production's on a night that trained nothing), and the
    outcome of the night before on that night's run."""
    ws = Workspace(Path(home))
    with ws.lineage(params, readonly=True) as store:
        nights = store.nights.all()
        runs = {g.id: g.mlflow_run_id for g in store.generations()}
    client = ws.tracking(params).client()

    def run_of(n: NightRow) -> str | None:
        return runs.get(n.generation_id if n.generation_id is not None else (n.production_id or n.live_generation_id))

    run = run_of(row)
    if run is not None:
        fc = "—" if row.forecast_map is None else f"{row.forecast_map:.4f}"
        what = row.action if row.fraction is None else f"{row.action} {row.fraction:.0%}"
        client.set_tag(run, "bctflow.night", f"{row.night} ({row.policy}): {what}, forecast {fc}")
        client.set_tag(run, "bctflow.night.reason", row.reason[:5000])
        if row.forecast_map is not None:
            client.log_metric(run, "night_forecast_map", row.forecast_map)
    before = [n for n in nights if n.id < row.id and n.outcome_map is not None]
    if before and (prev := run_of(before[-1])) is not None:
        client.log_metric(prev, "night_outcome_map", before[-1].outcome_map)
