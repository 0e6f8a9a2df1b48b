"""Compatibility metrics between model generations (docs/design.md §6).

Notation: M(φ_q, φ_g) is a retrieval metric (CMC@k or mAP) with queries
embedded by φ_q and the gallery by φ_g; φ_o is the old model, φ_n the new
one, φ* the new model trained with no alignment (the reference).

* P_com, P_up: HBCT paper Eqs. (14)-(15) as corrected in docs/design.md §6.
* Empirical compatibility criterion: Shen et al. (2020), and
  the Simplex paper, Eq. (7) (references: docs/design.md §10).
* AC / AA / ACA over a compatibility matrix:
  the Simplex paper §4.1, Eq. (8).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

__all__ = [
    "COMPAT_METRICS",
    "DENOMINATOR_EPS",
    "ILL_CONDITIONED",
    "REPORTED_METRICS",
    "DerivedMetrics",
    "compat_summary",
    "is_compatible",
    "p_com",
    "p_up",
]

#: the retrieval metrics every table and lineage record reports (CMC@k for any k is measured too)
REPORTED_METRICS: tuple[str, ...] = ("cmc@1", "cmc@5", "map")
#: the metrics P_com, P_up and the compatibility matrix are computed for
COMPAT_METRICS: tuple[str, ...] = ("cmc@1", "map")

#: |M(φ*, φ*) - M(φ_o, φ_o)| below this makes P_com undefined (None).
DENOMINATOR_EPS = 1e-12
#: |denominator| below this is flagged as ill-conditioned: P_com swings with small cross changes (docs/design.md §6.3)
ILL_CONDITIONED = 0.05


def p_com(cross: float, old_self: float, ref_self: float) -> tuple[float | None, float]:
    """P_com = (M(φ_n, φ_o) - M(φ_o, φ_o)) / (M(φ*, φ*) - M(φ_o, φ_o)) (docs/design.md §6).

    ``cross`` = M(φ_n, φ_o), ``old_self`` = M(φ_o, φ_o), ``ref_self`` =
    M(φ*, φ*). Returns ``(P_com, denominator)``; P_com is None when
    |denominator| < :data:`DENOMINATOR_EPS`. Whatever sign results is
    reported (a negative denominator means the reference model is worse than
    the old one). Always report the denominator next to P_com: when it is
    small, P_com swings wildly with tiny changes in ``cross`` (docs/design.md §6).
    """
    denominator = float(ref_self) - float(old_self)
    if abs(denominator) < DENOMINATOR_EPS:
        return None, denominator
    return (float(cross) - float(old_self)) / denominator, denominator


def p_up(new_self: float, ref_self: float) -> float | None:
    """P_up = (M(φ_n, φ_n) - M(φ*, φ*)) / M(φ*, φ*) (docs/design.md §6).

    The HBCT paper's Eq. (15) prints the cross metric in the numerator; design
    §6 explains why self is used. None when ``ref_self`` is 0.
    """
    ref = float(ref_self)
    if ref == 0.0:
        return None
    return (float(new_self) - ref) / ref


def is_compatible(cross: float, old_self: float) -> bool:
    """Empirical compatibility criterion (Shen et al.): M(φ_n, φ_o) > M(φ_o, φ_o)."""
    return bool(float(cross) > float(old_self))


def compat_summary(C: np.ndarray) -> dict[str, float | None]:
    """AC, AA and ACA of a compatibility matrix (probability-simplex paper §4.1).

    ``C``: (T, T), C[t][k] = M(φ_t, φ_k) (queries by generation t, gallery by
    generation k) for k <= t; the upper triangle is ignored (NaN or 0).
    With P = T(T-1)/2 cross pairs (k < t):

    * ``ac``  = (1/P) Σ_{k<t} 1[C[t][k] > C[k][k]]; None when T < 2.
    * ``aa``  = 2/(T(T+1)) Σ_{k<=t} C[t][k], the mean of the lower triangle
      including the diagonal.
    * ``aca`` = (1/P) Σ_{k<t} C[t][k] · 1[C[t][k] > C[k][k]], as the paper
      defines it: the sum of the compatible cross entries divided by *all*
      P pairs (so ACA = 0 when no pair is compatible, as in its Table 1);
      None when T < 2.
    * ``aca_given_compatible`` = the plain mean of the compatible cross
      entries (= aca / ac); None when no pair is compatible.
    """
    c = np.asarray(C, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] == 0:
        raise ValueError(
            f"compatibility matrix must be square (T, T) with T >= 1, got shape {c.shape}; "
            "put M(phi_t, phi_k) at row t, column k"
        )
    t_count = c.shape[0]
    rows, cols = np.tril_indices(t_count)
    lower = c[rows, cols]
    if not np.isfinite(lower).all():
        raise ValueError(
            "compatibility matrix has NaN/inf on or below the diagonal; evaluate every pair k <= t before summarising"
        )
    aa = float(lower.mean())
    if t_count < 2:
        return {"ac": None, "aa": aa, "aca": None, "aca_given_compatible": None}
    rows, cols = np.tril_indices(t_count, k=-1)
    cross = c[rows, cols]
    ok = cross > np.diag(c)[cols]
    n_pairs = cross.size
    return {
        "ac": float(ok.sum() / n_pairs),
        "aa": aa,
        "aca": float(cross[ok].sum() / n_pairs),
        "aca_given_compatible": float(cross[ok].mean()) if ok.any() else None,
    }


@dataclass(frozen=True)
class DerivedMetrics:
    """The numbers derived for a new generation against the live gallery (docs/design.md §6), per metric name.

    ``parent_self``: M(φ_live, φ_live) on the live gallery; ``p_com`` with its
    ``p_com_denominator``, and ``p_up`` (both need the independent reference φ*).
    Stores write them as rows named ``<field>/<metric>`` (e.g. ``p_com/map``):
    :meth:`to_rows` and :meth:`from_rows` are the only places that know that naming.
    """

    parent_self: dict[str, float] = field(default_factory=dict)
    p_com: dict[str, float | None] = field(default_factory=dict)
    p_com_denominator: dict[str, float] = field(default_factory=dict)
    p_up: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def measure(
        cls,
        *,
        new_self: dict[str, float],
        cross: dict[str, float] | None,
        old_self: dict[str, float],
        ref_self: dict[str, float] | None,
    ) -> DerivedMetrics:
        """P_com (when ``cross`` exists) and P_up (when the reference's ``ref_self`` exists).

        Both for every metric of :data:`COMPAT_METRICS`.
        """
        if ref_self is None:
            return cls(parent_self=dict(old_self))
        pc: dict[str, float | None] = {}
        den: dict[str, float] = {}
        if cross is not None:
            for m in COMPAT_METRICS:
                pc[m], den[m] = p_com(cross[m], old_self[m], ref_self[m])
        return cls(dict(old_self), pc, den, {m: p_up(new_self[m], ref_self[m]) for m in COMPAT_METRICS})

    def to_rows(self) -> dict[str, float | None]:
        return {f"{f.name}/{m}": v for f in fields(self) for m, v in getattr(self, f.name).items()}

    @classmethod
    def from_rows(cls, rows: dict[str, float | None]) -> DerivedMetrics:
        """The inverse of :meth:`to_rows`; rows of other kinds are ignored."""
        blocks: dict[str, dict[str, float | None]] = {f.name: {} for f in fields(cls)}
        for name, value in rows.items():
            kind, _, metric = name.partition("/")
            if kind in blocks and metric:
                blocks[kind][metric] = value
        return cls(**blocks)  # type: ignore[arg-type]
