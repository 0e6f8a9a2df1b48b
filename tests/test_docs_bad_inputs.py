"""docs/bad-inputs.md cites, for each bad input, the test that tries it: every cited test exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_test_the_bad_inputs_table_cites_exists():
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)", (REPO / "docs" / "bad-inputs.md").read_text())
    assert len(cited) >= 170
    missing = [
        f"{path}::{name}"
        for path, name in cited
        if not re.search(rf"^(async )?def {name}\(", (REPO / path).read_text(), re.M)
    ]
    assert missing == []


def test_the_bad_inputs_rows_are_numbered_once_each_without_gaps():
    numbers = [int(n) for n in re.findall(r"^\| (\d+) \|", (REPO / "docs" / "bad-inputs.md").read_text(), re.M)]
    assert sorted(numbers) == list(range(1, len(numbers) + 1))
