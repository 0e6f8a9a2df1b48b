"""The lifecycle: what the nightly run does — retrain when something changed, then, with params
``lifecycle.policy`` set, decide what serves and carry it out (docs/design.md §7.18): the policies (a catalog), each
night's options and forecasts, the actions through the commands' own code, the crash-consistent night."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face

#: the package's public face: each name and the module that defines it (imported on first use)
_FACE = {
    "nightly_generation": "nightly",
    "list_policies": "policies",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.lifecycle.nightly import nightly_generation as nightly_generation
    from flows.lifecycle.policies import list_policies as list_policies
