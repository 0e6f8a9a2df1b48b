"""Promotion: which generation the MLflow alias ``production`` serves (docs/design.md §7).

The gate runs automatically when a generation is committed: the live gallery
must accept the generation's queries (the measured compatibility fact) and every
backfill rule must pass. :func:`promote` is the manual path: without ``force``
it applies the same gate; with ``force`` a person overrides it, and the lineage
records who, when and why.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from components.errors import ConfigError, LineageError
from flows.generation.commit import PRODUCTION_ALIAS
from flows.generation.registration import gate_failures
from flows.params import Params
from flows.recovery.reconcile import restate_versions
from flows.runtime.workspace import Workspace

__all__ = ["promote"]


def promote(
    params: Params, ws: Workspace, gen_id: int, *, force: bool = False, by: str, reason: str = ""
) -> dict[str, object]:
    """Point ``production`` at generation ``gen_id`` and record it; refuse a gate failure unless ``force``. The
    production generation itself is answered ``already`` with nothing recorded (no promotion row, no alias or tag
    move), whatever its gate said."""
    with ws.lineage(params) as store:
        tracking = ws.tracking(params)
        g = store.generation(gen_id)
        if g.status == "retired":
            raise ConfigError(
                f"generation {gen_id} is retired (its gallery was replaced by a backfill); promote a serving generation"
            )
        if g.mlflow_version is None:
            raise LineageError(f"generation {gen_id} has no MLflow model version; it cannot be served")
        ptr = store.live_pointer()
        accepted = (ptr.compatible_generations or [ptr.generation_id]) if ptr else []
        prev = store.production_generation_id()
        if prev == gen_id:  # e.g. made production by its full backfill: nothing to gate, nothing to record twice
            return {
                "generation": gen_id,
                "version": g.mlflow_version,
                "previous": prev,
                "forced": False,
                "already": True,
                "live_gallery_accepts_queries": gen_id in accepted,
            }
        decision = store.decision(gen_id)
        checks = list(decision.checks) if decision is not None else []
        failed = gate_failures(g.compatible_with_live, checks, params.backfill.gate)
        if failed and not force:
            raise ConfigError(
                f"generation {gen_id} failed the promotion gate ({'; '.join(failed)}); pass --force to promote it "
                "anyway"
            )
        at = datetime.now(UTC).isoformat(timespec="seconds")
        status = f"promoted ({'forced' if force and failed else 'manual'} by {by} at {at})"
        text = reason or ("override of the gate: " + "; ".join(failed) if failed else "passed the gate")
        version = g.mlflow_version
        with contextlib.ExitStack() as undo:

            def move_alias() -> None:
                undo.callback(tracking.move_alias(PRODUCTION_ALIAS, version))
                tracking.set_tags(version, {"bctflow.promotion": status})

            store.record_promotion(gen_id, forced=bool(force and failed), by=by, reason=text, before_commit=move_alias)
            undo.pop_all()
        restate_versions(tracking, store)  # the versions' one-line states: this one's and the one it replaced
        return {
            "generation": gen_id,
            "version": version,
            "previous": prev,
            "forced": bool(force and failed),
            "already": False,
            "by": by,
            "at": at,
            "live_gallery_accepts_queries": gen_id in accepted,
        }
