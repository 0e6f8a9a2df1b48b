"""Which failures of the tracking / database steps are worth a retry."""

from __future__ import annotations

from typing import Any


def is_transient(exc: BaseException | None) -> bool:
    """Locked databases, dropped connections, timeouts: retry. Bad input: do not."""
    seen = 0
    while exc is not None and seen < 10:
        name = type(exc).__name__
        text = str(exc).lower()
        if name in {
            "OperationalError",
            "TimeoutError",
            "ConnectionError",
            "ConnectTimeout",
            "ReadTimeout",
            "DisconnectionError",
        }:
            return True
        if "database is locked" in text or "temporarily unavailable" in text or "connection reset" in text:
            return True
        if name == "MlflowException" and any(
            code in text for code in ("temporarily_unavailable", "resource_exhausted", "deadline_exceeded")
        ):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def retry_condition(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only transient failures."""
    try:
        state.result()
    except BaseException as exc:
        return is_transient(exc)
    return False
