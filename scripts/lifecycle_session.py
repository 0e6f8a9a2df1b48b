"""A scripted lifecycle session on digits.

g0 on classes 0–4, then four HBCT generations while classes 5–9 arrive, a full
backfill with the newest generation (ζ restarts from ζ₀ when
``backfill.restart_zeta``), then two more HBCT generations. Every step is the
real Prefect flow; the lineage, the MLflow registry and the live gallery are in
the workspace afterwards.

    python -m scripts.lifecycle_session --home /tmp/session            # paper-sized digits settings
    python -m scripts.lifecycle_session --home /tmp/s --set train.epochs=2   # quicker
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CHAIN_BEFORE = [
    {"name": "g0", "classes": [0, 1, 2, 3, 4]},
    {"name": "g1", "classes": [0, 1, 2, 3, 4, 5], "alignment": "hbct"},
    {"name": "g2", "classes": [0, 1, 2, 3, 4, 5, 6], "alignment": "hbct"},
    {"name": "g3", "classes": [0, 1, 2, 3, 4, 5, 6, 7], "alignment": "hbct"},
    {"name": "g4", "classes": "all", "alignment": "hbct"},
]
CHAIN_AFTER = [
    {"name": "g5", "classes": "all", "alignment": "hbct"},
    {"name": "g6", "classes": "all", "alignment": "hbct"},
]


def run_session(
    home: Path, params_path: Path, overrides: list[str] | None = None, reference: bool = False
) -> list[dict[str, Any]]:
    """Run the session in ``home`` and return the lineage (``bctflow lineage --json``)."""
    from flows.backfill.flow import backfill
    from flows.backfill.make import plan_backfill
    from flows.generation.flow import new_generation
    from flows.params import GenerationSpec, load_params
    from flows.planning import make_plan
    from flows.runtime.workspace import Workspace

    params = load_params(params_path, overrides)
    for spec in CHAIN_BEFORE:
        new_generation(make_plan(params, home, GenerationSpec(**spec, reference=reference)))
    backfill(plan_backfill(params, Workspace(home), target=len(CHAIN_BEFORE) - 1, fraction=1.0))
    for spec in CHAIN_AFTER:
        new_generation(make_plan(params, home, GenerationSpec(**spec, reference=reference)))
    with Workspace(home).lineage(params, readonly=True) as store:
        return store.to_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--reference", action="store_true", help="also train independent references (P_com / P_up)")
    a = ap.parse_args()
    from flows.runtime.env import configure_environment

    configure_environment(a.home.resolve())
    from rich.console import Console

    from bctflow.shell import timeline_of
    from bctflow.tables import lineage_table
    from flows.params import load_params

    home = a.home.resolve()
    gens = run_session(home, a.params, a.overrides, a.reference)
    Console(width=140).print(lineage_table(gens, timeline_of(load_params(a.params, a.overrides), home)))


if __name__ == "__main__":
    main()
