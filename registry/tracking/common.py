"""What every MLflow module of the registry shares: metric names, flattened params, a quiet MLflow."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "PARAM_MAX",
    "TAG_MAX",
    "finite_metrics",
    "flatten",
    "log_batch",
    "metric_key",
    "param_values",
    "quiet_mlflow",
]

#: MLflow's limits on a param value and a tag value (characters)
PARAM_MAX = 6000
TAG_MAX = 5000


def metric_key(name: str) -> str:
    """MLflow metric names allow [A-Za-z0-9_-. :/]; "self/cmc@1" → "self/cmc_at_1"."""
    return name.replace("@", "_at_")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists stay values (see :func:`param_values`)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def param_values(d: dict[str, Any]) -> dict[str, str]:
    """A nested mapping as MLflow params: dotted keys, JSON for lists and mappings, ``None`` as "null", each value
    cut to MLflow's limit."""

    def text(v: Any) -> str:
        return json.dumps(v, sort_keys=True) if isinstance(v, list | dict | type(None) | bool) else str(v)

    return {k: text(v)[:PARAM_MAX] for k, v in flatten(d).items()}


def log_batch(client: Any, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = ()) -> None:
    """``client.log_batch`` in pieces MLflow accepts (at most 1000 metrics and 100 params per call)."""
    metrics, params = list(metrics), list(params)
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i : i + 100])
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])


def finite_metrics(values: dict[str, Any]) -> dict[str, float]:
    """MLflow metric names for the finite values (None, NaN and inf are left out)."""
    return {metric_key(k): float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


#: MLflow warnings that do not apply to bctflow's models (their signature is given, their example is real images)
_IRRELEVANT_WARNINGS = ("type hint", "input example", "Pickle or CloudPickle")


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """Silence MLflow's chatty loggers and the warnings above.

    ``log_model`` installs its own ``simplefilter("once")``, which overrides ignore filters,
    so the irrelevant warnings are dropped where they would be shown instead.
    """
    names = ["mlflow", "alembic", "mlflow.utils.requirements_utils"]
    old = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, UserWarning) and any(w in str(message) for w in _IRRELEVANT_WARNINGS):
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        for n, lvl in old.items():
            logging.getLogger(n).setLevel(lvl)
