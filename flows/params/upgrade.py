"""params ``upgrade:``: how a bridge between two generations is fitted (``bctflow upgrade``, docs/design.md §11).

A bridge shapes no generation's model (every field is a run option): it is its own versioned object, fitted after
both generations are committed. The section lives in its own module so that flows/params/schema.py stays one screenful
per
section.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.params.tags import RunOption
from registry.records import ROUTES

__all__ = ["UpgradeParams"]


class UpgradeParams(BaseModel):
    """``upgrade:`` of params.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the bridge's map kind (components/bridges/maps): procrustes | low_rank | residual_mlp
    map: RunOption[str] = "procrustes"
    #: the map's options by name (low_rank: rank, ridge, iterations; residual_mlp: hidden, epochs, lr, batch, decay)
    map_options: RunOption[dict[str, Any]] = Field(default_factory=dict)
    #: paired items (embedded by both generations, drawn from the training split) as a fraction of the live gallery;
    #: never fewer than the map's two per source dimension, never more than the training split
    paired_fraction: RunOption[float] = Field(0.01, gt=0.0, le=1.0)
    #: the pairs' draw and the map's own randomness
    seed: RunOption[int] = 0
    #: `bctflow upgrade` without --route: auto (the cheapest route whose served mAP reaches the bar) | compatible |
    #: adapter | transform | backfill (flows/upgrade/route_rule.py)
    route: RunOption[Literal[("auto", *ROUTES)]] = "auto"  # type: ignore[valid-type]
    #: the bar of route auto: the served mAP on the labelled split a route must reach (null: no worse than now, the
    #: live gallery's served mAP as the lineage records it; flows/upgrade/choose.py)
    min_map: RunOption[float | None] = Field(None, ge=0.0, le=1.0)
