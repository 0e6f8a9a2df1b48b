"""What every command runs in: the workspace and its lock, the process environment, the Prefect API,
progress and log lines, retries of transient failures, a run's provenance, Prefect artifacts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face

#: the package's public face: each name and the module that defines it (imported on first use)
_FACE = {
    "Workspace": "workspace",
    "describe_run": "provenance",
    "provenance_line": "provenance",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.runtime.provenance import describe_run as describe_run
    from flows.runtime.provenance import provenance_line as provenance_line
    from flows.runtime.workspace import Workspace as Workspace
