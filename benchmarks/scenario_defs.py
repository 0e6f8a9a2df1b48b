"""The benchmark scenarios (docs/design.md §6, HBCT paper §5.1): which data and architecture the old and the new
model get. Their evaluation is :mod:`benchmarks.scenarios`."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.profile import Arch
from benchmarks.runner import Bench
from benchmarks.scenario_names import SCENARIOS
from components.errors import ConfigError

__all__ = ["SCENARIOS", "Scenario", "make_scenario"]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    old_classes: list[int] | str
    old_fraction: float
    old_arch: Arch
    new_arch: Arch
    epochs: int | None


def make_scenario(bench: Bench, name: str) -> Scenario:
    s = bench.settings
    c = bench.num_classes
    first = list(range(max(1, round(c * s.old_class_fraction))))
    epochs = s.scenario_epochs.get(name)
    if name == "ext_data":
        return Scenario(
            name,
            f"old: random {s.old_fraction:.0%} of the training data; new: all of it",
            "all",
            s.old_fraction,
            s.old_arch,
            s.old_arch,
            epochs,
        )
    if name == "ext_class":
        return Scenario(
            name,
            f"old: first {len(first)} of {c} classes; new: all classes",
            first,
            1.0,
            s.old_arch,
            s.old_arch,
            epochs,
        )
    if name == "new_arch":
        return Scenario(
            name,
            f"same data; old {s.old_arch.backbone}, new {s.new_arch.backbone} {s.new_arch.backbone_kwargs}",
            "all",
            1.0,
            s.old_arch,
            s.new_arch,
            epochs,
        )
    if name == "both":
        return Scenario(
            name,
            f"old: first {len(first)} of {c} classes on {s.old_arch.backbone}; "
            f"new: all classes on {s.new_arch.backbone}",
            first,
            1.0,
            s.old_arch,
            s.new_arch,
            epochs,
        )
    raise ConfigError(f"unknown scenario {name!r}; use one of {', '.join(SCENARIOS)}")
