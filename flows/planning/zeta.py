"""ζ chosen from data (``geometry.zeta_rule: percentile``, docs/design.md §3.3).

With the fixed rule an aligned generation gets ζ = ζ_prev + Δζ whatever its data. The percentile rule looks at
where the parent puts this generation's training images *before* its radial bound — the radius the parent's
projection gives them (``aux["radius"]`` of the Lorentz head), measured on a seeded sample of at most
:data:`SAMPLE` training images — and gives the new generation at least that radius at ``zeta_percentile``, plus
Δζ of room to grow into: ζ = max(ζ_prev + Δζ, P_q(parent radii) + Δζ). The plan records the choice and its reason
(the ζ step's Δ, and ``hyperparameters.zeta_reason`` in the lineage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from components.data.sources.split import SourceDataset
from components.models.encoder import EmbeddingModel
from flows.params import GeometryParams

__all__ = ["SAMPLE", "ZetaChoice", "choose_zeta", "parent_radii", "zeta_from_radii"]

#: training images the parent embeds to measure its radii
SAMPLE = 2000


@dataclass(frozen=True)
class ZetaChoice:
    """ζ of the new generation, the Δζ it grew by, and why (None: the fixed rule decided, nothing to say)."""

    zeta: float | None
    delta_zeta: float
    reason: str | None = None
    #: True when data raised ζ above the fixed step (worth a note in the run's log)
    raised: bool = False


def zeta_from_radii(radii: np.ndarray, percentile: float, delta: float) -> float:
    """P_percentile of ``radii`` (N,) (linear interpolation, NumPy's default) + ``delta``."""
    return float(np.percentile(np.asarray(radii, dtype=np.float64), percentile)) + float(delta)


def parent_radii(parent: EmbeddingModel, train: SourceDataset, seed: int, sample: int = SAMPLE) -> np.ndarray:
    """(n,) the parent's pre-bound tangent radii of a seeded sample of at most ``sample`` training images."""
    out = []
    with torch.no_grad():
        for images, _, _ in train.sample(sample, seed).loader(batch_size=256):
            out.append(parent(images.float() / 255.0, with_logits=False).aux["radius"].double().numpy())
    return np.concatenate(out)


def choose_zeta(
    g: GeometryParams,
    fixed: float | None,
    zeta_prev: float | None,
    parent: EmbeddingModel | None,
    train: SourceDataset,
    seed: int,
) -> ZetaChoice:
    """ζ by ``g.zeta_rule``: ``fixed`` (ζ_prev + Δζ, already computed) for the fixed rule, generation 0, Euclidean
    models or a parent without a radius, and when the fixed step is already the larger; else the percentile of the
    parent's radii over ``train`` + Δζ (``parent``: the parent model, None when it is not a Lorentz model)."""
    if g.zeta_rule != "percentile" or parent is None or fixed is None:
        return ZetaChoice(fixed, g.delta_zeta)
    radii = parent_radii(parent, train, seed)
    from_data = zeta_from_radii(radii, g.zeta_percentile, g.delta_zeta)
    if from_data <= fixed:
        reason = f"ζ_prev + Δζ = {fixed:.4g} ≥ P{g.zeta_percentile:g} of the parent's radii + Δζ = {from_data:.4g}"
        return ZetaChoice(fixed, g.delta_zeta, reason)
    zeta = round(from_data, 6)
    reason = (
        f"P{g.zeta_percentile:g} of the parent's pre-bound radii over {len(radii)} training images is "
        f"{from_data - g.delta_zeta:.4g}; ζ = that + Δζ = {zeta:.4g} (the fixed rule gave {fixed:.4g})"
    )
    base = zeta_prev if zeta_prev is not None else g.zeta0
    return ZetaChoice(zeta, round(zeta - base, 6), reason, raised=True)
