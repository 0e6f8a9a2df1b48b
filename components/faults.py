"""Named crash points for the fault-injection tests: ``BCTFLOW_KILL_AT=<name>`` makes the process SIGKILL itself
when it reaches that point, exactly as a power cut or an OOM kill would (no cleanup, no ``finally``).

Points are placed at the step boundaries of the generation commit and of the backfill, and after each training
epoch's checkpoint (docs/commit-protocol.md lists them); without the variable a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["KILL_ENV", "crash_point"]

KILL_ENV = "BCTFLOW_KILL_AT"


def crash_point(name: str) -> None:
    """SIGKILL this process here if ``$BCTFLOW_KILL_AT`` names this point."""
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
