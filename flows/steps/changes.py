"""Has anything changed since the last generation? (The nightly retraining's first question.)

A generation records the digest of the parameters that shape a model
(:func:`flows.params.params_digest`) and the content fingerprint of its dataset
(checksums of the source files or arrays, plus split and subsampling — the same
content the DVC manifest snapshots select from). Retraining is worth it when
either differs from the newest generation's.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.params import Params, params_digest
from flows.steps.context import load_splits
from flows.workspace import Workspace
from registry.lineage import LineageStore

__all__ = ["ChangeReport", "detect_changes"]


@dataclass(frozen=True)
class ChangeReport:
    changed: bool
    reason: str
    params_digest: str
    data_fingerprint: str
    last_generation: int | None


def detect_changes(params: Params, ws: Workspace, store: LineageStore) -> ChangeReport:
    digest = params_digest(params)
    fingerprint = load_splits(params, ws).fingerprint
    gens = store.generations()
    if not gens:
        return ChangeReport(True, "the lineage is empty: generation 0 is due", digest, fingerprint, None)
    last = gens[-1]
    reasons = []
    if last.params_digest != digest:
        reasons.append(f"parameters changed (digest {last.params_digest[:12]} → {digest[:12]})")
    if last.data_fingerprint != fingerprint:
        reasons.append("the data changed (dataset fingerprint differs)")
    if reasons:
        return ChangeReport(True, "; ".join(reasons) + f" since generation {last.id}", digest, fingerprint, last.id)
    return ChangeReport(
        False,
        f"no change since generation {last.id} (params digest {digest[:12]}, same data fingerprint); nothing to train",
        digest,
        fingerprint,
        last.id,
    )
