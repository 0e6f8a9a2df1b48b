"""The fixed value sets of the command line's options, each taken from its one home.

As ``Literal`` types, typer makes each a choice: ``--help`` lists the values, shell completion offers them, and the
parser refuses any other value with the valid ones listed, before a command starts. The homes: the alignment-method
catalog (every registered plugin of :mod:`components.losses.catalog`, its names read from the plugins' source:
importing them would import torch, and ``--help`` must start at once), the params schema (:mod:`flows.params`) and
the benchmark scenarios (:mod:`benchmarks.scenario_names`). Benchmark profiles are not a fixed set (``--profile``
also takes a YAML path), so they are only completed.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel

from benchmarks.profile import PROFILE_DIR
from benchmarks.scenario_names import ALL_SCENARIOS
from components.plugins import declared_names
from flows.backfill.rates import DEVICES
from flows.params import BackfillParams
from flows.params.gallery import IndexParams

__all__ = ["Alignment", "BackfillOrder", "CapacityDevice", "IndexType", "Scenario", "complete_profile"]


def _schema_values(model: type[BaseModel], field: str) -> tuple[str, ...]:
    """The values a ``Literal`` field of the params schema allows."""
    values = get_args(model.model_fields[field].annotation)
    if not values or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{model.__name__}.{field} is not a Literal of strings")
    return values


def _literal(values: tuple[str, ...] | list[str]) -> Any:
    """``Literal[values]`` built at import, from a set known only then."""
    return Literal[tuple(values)]  # type: ignore[valid-type]


#: every registered alignment method (a new plugin module is a new choice)
Alignment = _literal(declared_names("components.losses.methods", "register_alignment"))
#: what a partial backfill re-embeds first (params ``backfill.order``)
BackfillOrder = _literal(_schema_values(BackfillParams, "order"))
#: where a capacity plan's workers embed (``bctflow backfill --plan --items N --device``)
CapacityDevice = _literal(DEVICES)
#: the FAISS index types (params ``index.type``)
IndexType = _literal(_schema_values(IndexParams, "type"))
#: the benchmark scenarios of ``bctflow bench``
Scenario = _literal(ALL_SCENARIOS)


def complete_profile(incomplete: str) -> list[str]:
    """Shell completion of ``--profile``: the profiles shipped in benchmarks/profiles/ (a YAML path is also valid)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml") if p.stem.startswith(incomplete))
