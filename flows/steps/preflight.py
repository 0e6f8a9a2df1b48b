"""Plan a generation before anything starts: params, dataset, alignment, lineage, checkpoints, then the inputs
that need the data, the model and the disk (:mod:`flows.steps.checks`).

Runs in the calling process (no Prefect server needed) and writes nothing but the dataset cache (a dataset that
is not there yet is fetched now, when downloads are on): the lineage is opened read-only, and an empty lineage
stands in for one that does not exist yet. The plan it returns is the run's only plan: the flow takes it as its
parameter.
"""

from __future__ import annotations

from pathlib import Path

from flows.params import GenerationSpec, Params
from flows.plan import GenerationPlan, make_plan
from flows.steps.checks import check_generation_inputs
from flows.steps.zeta import choose_zeta
from flows.workspace import Workspace

__all__ = ["plan_generation"]


def plan_generation(
    params: Params,
    home: str | Path,
    spec: GenerationSpec | None = None,
    *,
    digest: str | None = None,
    data_fingerprint: str | None = None,
    code: str | None = None,
) -> GenerationPlan:
    """The plan of the next generation in the workspace at ``home``, or the error the input deserves."""
    ws = Workspace(Path(home))
    with ws.lineage(params, readonly=True) as store:
        plan = make_plan(params, ws, store, spec, digest=digest, data_fingerprint=data_fingerprint, code=code)
    check_generation_inputs(plan)
    return choose_zeta(plan)
