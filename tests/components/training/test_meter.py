"""EpochMeter: the stacked on-device sums equal the float64 sums of every scalar, in first-seen key order."""

from __future__ import annotations

import pytest
import torch

from components.training.meter import EpochMeter, TrainingDivergedError


def test_means_are_the_float64_means_of_each_scalar_in_first_seen_order():
    meter = EpochMeter(torch.device("cpu"))
    steps = [(0.1, 2.5, 7), (0.3, -1.25, 9), (1e-8, 3.0, 11)]
    for a, b, n in steps:
        meter.step(torch.tensor(a + b), {"a": torch.tensor(a)})
        meter.add({"b": torch.tensor(b, dtype=torch.bfloat16), "a": torch.tensor(a), "n": n})
    meter.add({"a": torch.tensor(1.0)})  # a key in a second group is summed with the first
    means = meter.means()
    assert list(means) == ["b", "a", "n"]
    f32 = [float(torch.tensor(a)) for a, _, _ in steps]
    assert means["a"] == pytest.approx((sum(f32) + 1.0) / 3, abs=0, rel=1e-15)
    assert means["b"] == sum(float(torch.tensor(b, dtype=torch.bfloat16)) for _, b, _ in steps) / 3
    assert means["n"] == 9.0
    meter.check_finite(0)  # every loss finite


def test_the_first_non_finite_step_is_reported_with_its_terms():
    meter = EpochMeter(torch.device("cpu"))
    meter.step(torch.tensor(1.0), {"base": torch.tensor(1.0), "align": torch.tensor(0.5)})
    meter.step(torch.tensor(float("nan")), {"base": torch.tensor(2.0), "align": torch.tensor(float("nan"))})
    meter.step(torch.tensor(float("inf")), {"base": torch.tensor(3.0), "align": torch.tensor(4.0)})
    with pytest.raises(TrainingDivergedError, match=r"epoch 2 \(terms of the first bad step: base=2, align=nan\)"):
        meter.check_finite(1)
