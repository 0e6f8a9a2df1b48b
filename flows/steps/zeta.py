"""ζ chosen from data (``geometry.zeta_rule: percentile``, docs/design.md §3.3).

With the fixed rule an aligned generation gets ζ = ζ_prev + Δζ whatever its data. The percentile rule looks at
where the parent puts this generation's training images *before* its radial bound — the radius the parent's
projection gives them (``aux["radius"]`` of the Lorentz head), measured on a seeded sample of at most
:data:`SAMPLE` training images — and gives the new generation at least that radius at ``zeta_percentile``, plus
Δζ of room to grow into: ζ = max(ζ_prev + Δζ, P_q(parent radii) + Δζ). The choice and its reason are recorded in
the lineage (the ζ step's Δ, and ``hyperparameters.zeta_reason``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from components.models import load_model
from flows.plan import GenerationPlan
from flows.steps.context import load_splits

__all__ = ["SAMPLE", "choose_zeta", "parent_radii", "zeta_from_radii"]

#: training images the parent embeds to measure its radii
SAMPLE = 2000


def zeta_from_radii(radii: np.ndarray, percentile: float, delta: float) -> float:
    """P_percentile of ``radii`` (N,) (linear interpolation, NumPy's default) + ``delta``."""
    return float(np.percentile(np.asarray(radii, dtype=np.float64), percentile)) + float(delta)


def parent_radii(plan: GenerationPlan, sample: int = SAMPLE) -> np.ndarray:
    """(n,) the parent's pre-bound tangent radii of a seeded sample of this generation's training images."""
    assert plan.parent is not None
    split = load_splits(plan.params, plan.workspace).train.sample(sample, plan.params.data.split_seed + plan.gen_id)
    model = load_model(Path(plan.parent.checkpoint)).eval()
    out = []
    with torch.no_grad():
        for images, _, _ in split.loader(batch_size=256):
            out.append(model(images.float() / 255.0, with_logits=False).aux["radius"].double().numpy())
    return np.concatenate(out)


def choose_zeta(plan: GenerationPlan) -> GenerationPlan:
    """The plan with ζ from the percentile rule (unchanged for the fixed rule, generation 0, Euclidean models or a
    parent without a radius, and when the fixed step is already larger)."""
    g = plan.params.geometry
    if g.zeta_rule != "percentile" or plan.parent is None or plan.zeta is None or plan.parent.geometry != "lorentz":
        return plan
    radii = parent_radii(plan)
    from_data = zeta_from_radii(radii, g.zeta_percentile, plan.delta_zeta)
    if from_data <= plan.zeta:
        reason = f"ζ_prev + Δζ = {plan.zeta:.4g} ≥ P{g.zeta_percentile:g} of the parent's radii + Δζ = {from_data:.4g}"
        return plan.model_copy(update={"zeta_reason": reason})
    zeta = round(from_data, 6)
    reason = (
        f"P{g.zeta_percentile:g} of the parent's pre-bound radii over {len(radii)} training images is "
        f"{from_data - plan.delta_zeta:.4g}; ζ = that + Δζ = {zeta:.4g} (the fixed rule gave {plan.zeta:.4g})"
    )
    base = plan.zeta_prev if plan.zeta_prev is not None else plan.params.geometry.zeta0
    return plan.model_copy(
        update={
            "zeta": zeta,
            "delta_zeta": round(zeta - base, 6),
            "zeta_reason": reason,
            "notes": (*plan.notes, reason),
        }
    )
