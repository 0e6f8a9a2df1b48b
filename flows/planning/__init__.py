"""Planning a generation: :func:`make_plan` decides and checks everything once and returns the final
:class:`GenerationPlan` the flow runs (docs/design.md §7.9); :func:`resolve_role` resolves one role of it (a
benchmark's model) on its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face
from flows.planning.make import make_plan
from flows.planning.plan import ROLES, GenerationPlan, ParentRef, RolePlan, check_current

#: resolving one role on its own, and the module that defines it (imported on first use)
_FACE = {"RoleRequest": "roles", "resolve_role": "roles"}
__all__ = ["ROLES", "GenerationPlan", "ParentRef", "RolePlan", "check_current", "make_plan", *sorted(_FACE)]
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.planning.roles import RoleRequest as RoleRequest
    from flows.planning.roles import resolve_role as resolve_role
