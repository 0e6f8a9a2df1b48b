"""The names of the benchmark scenarios, in one light module: the scenario definitions, ``bctflow bench`` and its
``--scenario`` choices read them (the CLI without importing the training code)."""

from __future__ import annotations

__all__ = ["ALL_SCENARIOS", "SCENARIOS"]

#: the method-table scenarios (benchmarks/scenario_defs.py defines what each gives the old and the new model)
SCENARIOS = ("ext_data", "ext_class", "new_arch", "both", "sequential")
#: every scenario `bctflow bench --scenario` runs
ALL_SCENARIOS = (*SCENARIOS, "partial_backfill")
