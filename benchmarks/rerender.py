"""Re-write a method table's report from its ``results.json`` (no training): ``python -m benchmarks.rerender DIR...``.

What a table measured is in ``results.json``; ``report.md`` and ``results.csv`` are views of it. When the views
change (a column added), the committed reports are re-rendered from the numbers they hold rather than re-trained.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.profile import CRITERION_ROLES, PROFILE_DIR, Arch, load_profile
from benchmarks.report import write_table_report
from benchmarks.rows import Row
from benchmarks.scenario_defs import Scenario
from benchmarks.scenarios import TableResult

__all__ = ["rerender_table", "row_from_dict"]


def row_from_dict(d: dict[str, Any]) -> Row:
    """A table row from its results.json dict (``Row.as_dict``)."""
    fields = dict(d)
    fields["self_"] = fields.pop("self")
    return Row(**fields)


def rerender_table(out_dir: Path) -> Path:
    """Re-write ``out_dir``'s report.md, results.csv and results.json from its results.json; returns report.md."""
    doc = json.loads((out_dir / "results.json").read_text())
    sc = dict(doc["scenario"])
    scenario = Scenario(**{**sc, "old_arch": Arch(**sc["old_arch"]), "new_arch": Arch(**sc["new_arch"])})
    res = TableResult(
        scenario,
        [row_from_dict(r) for r in doc["rows"]],
        doc.get("best_baseline"),
        doc.get("base_models", {}),
        doc.get("heads_tried", []),
    )
    return write_table_report(res, _with_criterion_roles(doc["context"]), out_dir)


def _with_criterion_roles(ctx: dict[str, Any]) -> dict[str, Any]:
    """``ctx`` with the roles its train criterion holds: a table written before its context recorded them takes its
    profile's setting (a profile of benchmarks/profiles/ by name; one no longer there holds the default roles)."""
    if "criterion_roles" in ctx or ctx.get("train_criterion") is None:
        return ctx
    path = PROFILE_DIR / f"{ctx.get('profile')}.yaml"
    roles = load_profile(str(path))[0].bench.criterion_roles if path.is_file() else list(CRITERION_ROLES)
    return {**ctx, "criterion_roles": roles}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(rerender_table(Path(arg)))
