"""The part-folder readings the scale benchmark's kills use (benchmarks/scale_workers.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.scale_workers import items_in_parts, past_half


def test_half_the_parts_of_a_store_and_the_items_they_hold(tmp_path: Path):
    parts = tmp_path / "parts"
    assert not past_half(parts, 100, 10) and items_in_parts(parts) == 0  # no folder yet
    parts.mkdir()
    for k in range(4):
        np.savez(parts / f"part-{k:05d}.npz", ids=np.arange(10 * k, 10 * k + 10))
    assert not past_half(parts, 100, 10) and items_in_parts(parts) == 40  # 4 of 10 parts
    np.savez(parts / "part-00004.npz", ids=np.arange(40, 50))
    assert past_half(parts, 100, 10) and items_in_parts(parts) == 50
    assert past_half(parts, 5, 10)  # a store of less than two parts: one part is half
