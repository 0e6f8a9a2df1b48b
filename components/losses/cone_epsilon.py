"""ε chosen from data: an entailment cone wide enough to hold a typical successor (docs/design.md §4.6).

HBCT Eq. (11) sets every cone's half-aperture through one constant ε (the paper: 0.1). At ε = 0.1 and ζ 1.0 → 1.2 a
new point lies in its old point's cone only within about 1.3° of the old direction, so the entailment term of
Eq. (13) is a constant outward pull that drives the new model's radii to ζ (benchmarks/results/README.md, "Keeping
the hyperbolic uncertainty alive"). The ``view_angle`` rule (``alignment.options.hbct.epsilon_rule``) reads ε off
the parent instead: the parent's own disagreement between two augmented views of one image is a disagreement no
successor can be asked to beat.

For n training images (a seeded sample) the parent embeds two views a and b (the training augmentation): tangent
vectors z_a, z_b (n, d). The successor's point is modelled as view b's direction at view a's radius plus the room
the generation's ζ step gives it, Δζ = ζ_new − ζ_old:

    h_o,i = exp_o(z_a,i),    h_n,i = exp_o(ẑ_b,i·(‖z_a,i‖ + Δζ))                          (HBCT Eq. (5))
    ε_i   = √K‖h_o,i,s‖·sin(min(ext(h_o,i, h_n,i), π/2))/2   (aper(h_o,i) = ext: Eq. (11) solved for ε)
    ε     = max(ε_configured, P_q(ε_1 … ε_n))

so the cone holds that modelled successor for q% of the items (q = ``epsilon_percentile``, default 50: the typical
item), and the rule only ever widens the configured cone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from components.geometry import aperture_epsilon, expmap0, exterior_angle
from components.models.encoder import EmbeddingModel

__all__ = ["SAMPLE", "ConeEpsilon", "item_epsilons", "view_epsilon"]

#: training images the parent embeds (twice) to choose ε
SAMPLE = 2000


@dataclass(frozen=True)
class ConeEpsilon:
    """The ε a rule chose, with what it measured."""

    epsilon: float
    #: P_q of the items' ε_i, before the configured floor
    from_data: float
    percentile: float
    items: int
    #: median angle between the parent's two views' tangent directions, degrees
    view_angle_deg: float
    room: float
    reason: str


def item_epsilons(z_a: Tensor, z_b: Tensor, k: float, room: float) -> Tensor:
    """(n,) ε_i of each item (module docstring): the ε whose cone at exp_o(z_a,i) just holds the point in z_b,i's
    direction at radius ‖z_a,i‖ + ``room``. ``z_a``, ``z_b``: (n, d) tangent vectors of two views, row-aligned."""
    r = torch.linalg.vector_norm(z_a, dim=-1, keepdim=True)
    direction = torch.nn.functional.normalize(z_b, dim=-1)
    h_o = expmap0(z_a, k)
    h_n = expmap0(direction * (r + room), k)
    return aperture_epsilon(h_o, exterior_angle(h_o, h_n, k), k)


def view_epsilon(
    parent: EmbeddingModel,
    batches: Iterator[tuple[Tensor, Tensor]],
    augment: Callable[[Tensor, torch.Generator], Tensor],
    *,
    room: float,
    percentile: float,
    floor: float,
    seed: int,
) -> ConeEpsilon:
    """ε by the ``view_angle`` rule (module docstring) from ``parent`` (a Lorentz model, frozen) over ``batches``
    (images (B, C, H, W) in [0, 1] on the parent's device; a seeded sample of the training data), each augmented
    twice by ``augment(x, generator)`` with a generator seeded by ``seed``. Float64 geometry."""
    gen = torch.Generator().manual_seed(seed)
    room = max(0.0, float(room))
    k = float(parent.curvature.detach())
    za, zb = [], []
    with torch.no_grad():
        for x, _ in batches:
            za.append(parent(augment(x, gen), with_logits=False).z.double().cpu())
            zb.append(parent(augment(x, gen), with_logits=False).z.double().cpu())
    z_a, z_b = torch.cat(za), torch.cat(zb)
    eps_i = item_epsilons(z_a, z_b, k, room).numpy()
    cos = torch.nn.functional.cosine_similarity(z_a, z_b, dim=-1).clamp(-1.0, 1.0)
    angle = float(np.degrees(np.median(torch.acos(cos).numpy())))
    from_data = float(np.percentile(eps_i, percentile))
    eps = max(float(floor), from_data)
    rule = f"P{percentile:g} of the parent's view-to-view ε over {len(eps_i)} training images"
    reason = f"{rule} (median view angle {angle:.3g}°, room Δζ = {room:.3g}) is {from_data:.4g}" + (
        f"; ε = {eps:.4g}" if eps == from_data else f" < the configured ε {floor:g}, kept"
    )
    return ConeEpsilon(eps, from_data, float(percentile), len(eps_i), angle, room, reason)
