"""Planning a generation: :func:`make_plan` decides and checks everything once and returns the final
:class:`GenerationPlan` the flow runs (docs/design.md §7.9)."""

from flows.planning.make import make_plan
from flows.planning.plan import ROLES, GenerationPlan, ParentRef, RolePlan, check_current

__all__ = ["ROLES", "GenerationPlan", "ParentRef", "RolePlan", "check_current", "make_plan"]
