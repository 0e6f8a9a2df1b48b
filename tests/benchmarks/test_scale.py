"""Pieces of ``bctflow bench scale`` (benchmarks/scale.py) that run without the Fashion-MNIST corpus: reading the
backfill's own log line (the store's keys: test_scale_store.py)."""

from __future__ import annotations

import pytest

from benchmarks.scale import _reembedded


def test_the_backfill_log_line_gives_items_and_rate():
    line = (
        "serving corpus: 500288 of 1000000 selected items embedded now (499712 by an earlier run) at 2664 items/s; "
        "977 of 1954 parts resumed"
    )
    out = f"noise\n12:00:01 | INFO | Task run 'embed-parts' - {line}\n"
    assert _reembedded(out) == (500288, 2664.0)
    with pytest.raises(RuntimeError, match="no 'serving corpus"):
        _reembedded("the run printed something else")
