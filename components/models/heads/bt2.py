"""``bt2``: the BT² basis-transformation head (the BT² paper, Algorithm 1; docs/design.md §5.7).

embed_dim + extra_dims wide; its first compat_dim dimensions (φ5) are compatible with the parent's gallery, and the
classifier reads φ3 (the part trained like an independent new model), not the embedding. ``ModelSpec`` fields it
reads: ``embed_dim`` (m), ``compat_dim`` (n, default m), ``extra_dims`` (d), ``bt2_scale`` (C). Euclidean only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.geometry import Euclidean
from components.models.head_catalog import HeadKind, HeadOutput, register_head

if TYPE_CHECKING:
    from components.models.spec import ModelSpec

__all__ = ["BT2", "BT2Head", "orthonormal_from_skew"]

#: orthonormal_from_skew left out of torch.compile: made at first use (importing torch._dynamo), then a module global
_LEFT_OUT = "orthonormal_left_out_of_compile"


def orthonormal_from_skew(params: Tensor) -> Tensor:
    """P = exp(A) with A = U − Uᵀ skew-symmetric, so P is orthonormal (BT² Lemma 2). (m, m) → (m, m).

    :class:`BT2Head` calls it left out of ``torch.compile`` (a graph break): on CUDA, ``matrix_exp`` copies from the
    host to choose its degree, which CUDA-graph capture (``train.compile_mode: reduce-overhead``, the default on a
    GPU) refuses — seen on an H200, where every BT² model failed at its first step. The head wraps it when it is
    built, not at import: ``torch.compiler.disable`` imports ``torch._dynamo`` (2 s of every command's start-up
    here, for a head most models do not have)."""
    a = params.triu(1)
    return torch.linalg.matrix_exp(a - a.t())


def __getattr__(name: str) -> Any:
    """``orthonormal_left_out_of_compile``: :func:`orthonormal_from_skew` under ``torch.compiler.disable``, made at
    first use and kept as this module's global of that name, so a head holding it pickles by that name (the spawn
    of distributed training) and a new process makes it again when it unpickles one."""
    if name != _LEFT_OUT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    left_out = torch.compiler.disable(orthonormal_from_skew)
    left_out.__name__ = left_out.__qualname__ = name
    globals()[name] = left_out
    return left_out


class BT2Head(nn.Module):
    """BT² head (the BT² paper, Algorithm 1; docs/design.md §5.7).

    With m = embed_dim (the part trained like an independent new model),
    n = compat_dim (the old gallery's dimension) and d = extra_dims:

        φ1 = neck(features) ∈ R^(m+n);  φ2 = normalise(f(φ1)) ∈ R^d;  φ3 = normalise(φ1[:m])
        φ4 = C·B1 φ3 ∈ R^m;             φ5 = B2 [φ2; φ4[:n−d]] ∈ R^n
        φ_new = normalise([φ5; φ4[n−d:]]) ∈ R^(m+d)

    B1, B2 are learnable orthonormal basis transformations exp(A) (Lemma 2), so no
    information of φ3 is lost. The classifier sees φ3 (cls_input); the alignment
    loss sees normalise(φ5) (aux["compat"]), the prefix compared with old galleries.
    """

    def __init__(
        self, in_features: int, embed_dim: int, compat_dim: int, extra_dims: int, scale_c: float = 1.0
    ) -> None:
        super().__init__()
        m, n, d = embed_dim, compat_dim, extra_dims
        self.m, self.n, self.d = m, n, d
        self.neck = nn.Linear(in_features, m + n)
        self.f = nn.Linear(m + n, d) if d > 0 else None
        self.b1 = nn.Parameter(torch.zeros(m, m))
        self.b2 = nn.Parameter(torch.zeros(n, n))
        self.scale_c = float(scale_c)
        self._orthonormal = globals().get(_LEFT_OUT) or __getattr__(_LEFT_OUT)  # see orthonormal_from_skew

    def forward(self, feats: Tensor) -> HeadOutput:
        phi1 = self.neck(feats).float()
        phi3 = F.normalize(phi1[:, : self.m], dim=-1)
        phi4 = self.scale_c * phi3 @ self._orthonormal(self.b1).t()
        keep = self.n - self.d
        parts = [phi4[:, :keep]]
        if self.f is not None:
            parts.insert(0, F.normalize(self.f(phi1), dim=-1))
        phi5 = torch.cat(parts, dim=-1) @ self._orthonormal(self.b2).t()
        z = torch.cat([phi5, phi4[:, keep:]], dim=-1)
        emb = F.normalize(z, dim=-1)
        clipped = torch.zeros(z.shape[0], dtype=torch.bool, device=z.device)
        return HeadOutput(
            z, emb, clipped, cls_input=phi3, aux={"compat": F.normalize(phi5, dim=-1), "independent": phi3}
        )


@register_head("bt2")
class BT2(HeadKind):
    """The rules of :class:`BT2Head` read off a spec: n = ``compat_dim`` (default ``embed_dim``) must hold the
    extra dimensions, and n − d ≤ m."""

    classifies_embedding = False

    @staticmethod
    def _n(spec: ModelSpec) -> int:
        return spec.compat_dim if spec.compat_dim is not None else spec.embed_dim

    @classmethod
    def check(cls, spec: ModelSpec) -> None:
        if not isinstance(spec.space, Euclidean):
            raise ValueError("the BT² head is Euclidean; use geometry 'euclidean'")
        n = cls._n(spec)
        if not (0 <= spec.extra_dims <= n and n - spec.extra_dims <= spec.embed_dim):
            raise ValueError(
                f"BT² needs 0 <= extra_dims ({spec.extra_dims}) <= compat_dim ({n}) "
                f"and compat_dim - extra_dims <= embed_dim ({spec.embed_dim})"
            )

    @classmethod
    def output_dim(cls, spec: ModelSpec) -> int:
        return spec.embed_dim + spec.extra_dims

    @classmethod
    def compat_prefix(cls, spec: ModelSpec) -> int | None:
        return cls._n(spec)

    @classmethod
    def build(cls, spec: ModelSpec, in_features: int) -> nn.Module:
        return BT2Head(in_features, spec.embed_dim, cls._n(spec), spec.extra_dims, spec.bt2_scale)
