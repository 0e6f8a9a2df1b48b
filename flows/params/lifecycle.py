"""params ``lifecycle:``: what the nightly run does after a generation commits (docs/design.md §7.18).

``policy`` names a policy of the catalog (:mod:`flows.lifecycle.policies`): ``null`` leaves the nightly run as it was
(retrain, evaluate, decide, record — nothing acted on). The budget is a night's compute for re-embedding: items
(``budget_items``) and/or worker-seconds (``budget_seconds``); ``target_map`` the served mAP the ``budget`` policy
aims for (the cheapest action that reaches it within the budget; none reaching it: the best within the budget).
None of these shape a generation's model: every field is a run option.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.params.tags import RunOption

__all__ = ["POLICIES", "LifecycleParams"]

#: the policies of the catalog, cheapest in re-embedding first (the schema checks names against this list; the
#: catalog, :mod:`flows.lifecycle.policies`, checks that it registers exactly these)
POLICIES = ("never", "rules", "every_k", "budget", "always")


class LifecycleParams(BaseModel):
    """The policy the nightly run carries out after a generation commits, and its budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: never | always | every_k | rules | budget (null: decide and record only, act on nothing)
    policy: RunOption[str | None] = None
    #: items a night may re-embed (a full backfill beyond it continues over the next nights); null: no item limit
    budget_items: RunOption[int | None] = Field(None, gt=0)
    #: worker-seconds a night may spend re-embedding, as the backfill plan forecasts them; null: no time limit
    budget_seconds: RunOption[float | None] = Field(None, gt=0.0)
    #: the served mAP@R the budget policy aims for (null: the best it can reach within the budget)
    target_map: RunOption[float | None] = Field(None, gt=0.0, le=1.0)
    #: every_k: a full backfill every k nights
    every_k: RunOption[int] = Field(3, ge=1)
    #: the budget policy's partial backfills: the fractions it considers (each 10%, as the backfill plan forecasts)
    step: RunOption[float] = Field(0.1, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _known_policy(self) -> LifecycleParams:
        if self.policy is not None and self.policy not in POLICIES:
            raise ValueError(
                f"unknown lifecycle.policy {self.policy!r}; use one of {', '.join(POLICIES)} (or null: decide only)"
            )
        if self.policy == "budget" and self.budget_items is None and self.budget_seconds is None:
            raise ValueError(
                "lifecycle.policy budget needs a budget: set lifecycle.budget_items (items a night may re-embed) "
                "and/or lifecycle.budget_seconds"
            )
        return self
