"""Has anything changed since the last generation? (The nightly retraining's first question.)

A generation records the digest of the parameters that shape a model
(:func:`flows.params.params_digest`), the content fingerprint of its dataset
(checksums of the source files or arrays, plus split and subsampling — the same
content the DVC manifest snapshots select from) and the digest of the code that
shapes a model (:func:`components.code_digest.code_digest`). Retraining is worth
it when any differs from the newest generation's. A generation recorded before
lineage revision 0004 has no code digest: its code is unknown, and that alone is
no reason to retrain (docs/design.md §7.14).
"""

from __future__ import annotations

from dataclasses import dataclass

from components.code_digest import code_digest
from flows.gallery.data import load_splits
from flows.params import Params, params_digest
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = ["ChangeReport", "detect_changes"]


@dataclass(frozen=True)
class ChangeReport:
    changed: bool
    reason: str
    params_digest: str
    data_fingerprint: str
    last_generation: int | None
    code_digest: str = ""


def detect_changes(params: Params, ws: Workspace, store: LineageDB, code: str | None = None) -> ChangeReport:
    """Compare params, data and code with the newest generation's. ``code``: the code digest (default: this
    process's :func:`~components.code_digest.code_digest`)."""
    digest = params_digest(params)
    fingerprint = load_splits(params, ws).fingerprint
    code = code or code_digest()
    gens = store.generations()
    if not gens:
        return ChangeReport(True, "the lineage is empty: generation 0 is due", digest, fingerprint, None, code)
    last = gens[-1]
    reasons = []
    if last.params_digest != digest:
        reasons.append(f"parameters changed (digest {last.params_digest[:12]} → {digest[:12]})")
    if last.data_fingerprint != fingerprint:
        reasons.append("the data changed (dataset fingerprint differs)")
    if last.code_digest is not None and last.code_digest != code:
        reasons.append(f"code changed (digest {last.code_digest[:12]} → {code[:12]})")
    if reasons:
        why = "; ".join(reasons) + f" since generation {last.id}"
        return ChangeReport(True, why, digest, fingerprint, last.id, code)
    unknown = (
        "; its code digest is unknown (recorded before lineage revision 0004), code changes count from the next "
        "generation"
        if last.code_digest is None
        else ", same code"
    )
    return ChangeReport(
        False,
        f"no change since generation {last.id} (params digest {digest[:12]}, same data fingerprint{unknown}); nothing "
        "to train",
        digest,
        fingerprint,
        last.id,
        code,
    )
