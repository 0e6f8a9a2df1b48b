"""Promotion: which generation the MLflow alias ``production`` serves (design §7).

The gate runs automatically when a generation is committed (every backfill rule
must pass against the live gallery's generation). :func:`promote` is the
manual path: without ``force`` it applies the same gate; with ``force`` a person
overrides it, and the lineage records who, when and why.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flows.params import Params
from flows.steps.commit import PRODUCTION_ALIAS
from flows.steps.context import registry_for, store_for
from flows.workspace import Workspace
from components.errors import ConfigError, LineageError

__all__ = ["promote"]


def promote(params: Params, ws: Workspace, gen_id: int, *, force: bool = False, by: str, reason: str = "") -> dict[str, object]:
    """Point ``production`` at generation ``gen_id`` and record it; refuse a gate failure unless ``force``."""
    store = store_for(params, ws)
    registry = registry_for(params, ws)
    try:
        g = store.generation(gen_id)
        if g.status == "retired":
            raise ConfigError(f"generation {gen_id} is retired (its gallery was replaced by a backfill); promote a serving generation")
        if g.mlflow_version is None:
            raise LineageError(f"generation {gen_id} has no MLflow model version; it cannot be served")
        decision = store.decision(gen_id)
        failed = list(decision.reasons) if decision is not None and decision.required else []
        if failed and not force:
            raise ConfigError(f"generation {gen_id} failed the promotion gate ({'; '.join(failed)}); pass --force to promote it anyway")
        prev = store.production_generation_id()
        prev_version = store.generation(prev).mlflow_version if prev is not None else None
        at = datetime.now(UTC).isoformat(timespec="seconds")
        status = f"promoted ({'forced' if force and failed else 'manual'} by {by} at {at})"
        text = reason or ("override of the gate: " + "; ".join(failed) if failed else "passed the gate")

        def move_alias() -> None:
            registry.set_alias(PRODUCTION_ALIAS, g.mlflow_version)
            registry.set_tags(g.mlflow_version, {"bctflow.promotion": status})

        try:
            store.record_promotion(gen_id, forced=bool(force and failed), by=by, reason=text, before_commit=move_alias)
        except BaseException:
            if prev_version is not None:
                registry.set_alias(PRODUCTION_ALIAS, prev_version)
            raise
        ptr = store.live_pointer()
        accepted = (ptr.compatible_generations or [ptr.generation_id]) if ptr else []
        return {"generation": gen_id, "version": g.mlflow_version, "previous": prev, "forced": bool(force and failed), "by": by, "at": at,
                "live_gallery_accepts_queries": gen_id in accepted}
    finally:
        store.close()
