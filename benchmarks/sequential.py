"""The sequential scenario: classes arrive in T equal stages, the backbone switches part-way, and each method's
model of stage t is aligned to its own model of stage t − 1 (docs/design.md §6.6).

Reported as compatibility matrices C[t][k] = M(φ_t, φ_k), k ≤ t, with AC / AA / ACA (docs/design.md §6.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.profile import Arch, MethodEntry
from benchmarks.runner import Bench, BenchModel, ModelRequest
from benchmarks.scenarios import SIMPLEX
from components.errors import ConfigError
from components.evaluation import COMPAT_METRICS, compat_summary
from components.geometry import Euclidean

__all__ = ["SequentialResult", "run_sequential"]


@dataclass
class SequentialResult:
    stages: list[list[int]]
    archs: list[str]
    matrices: dict[str, dict[str, list[list[float | None]]]]
    summary: dict[str, dict[str, dict[str, float | None]]]
    seconds: dict[str, float]


@dataclass(frozen=True)
class _Stages:
    classes: list[list[int]]
    archs: list[Arch]
    zeta: list[float]
    epochs: int | None


def _method_chain(
    bench: Bench, name: str, e: MethodEntry, st: _Stages, indep: dict[str, list[BenchModel]]
) -> list[BenchModel]:
    """The method's models, stage by stage, each aligned to the previous one (stage 0: the independent model)."""
    chain = [indep[e.geometry][0]]
    for t in range(1, len(st.classes)):
        chain.append(
            bench.train_model(
                f"seq/{name}/t{t}",
                ModelRequest(
                    bench.selection(st.classes[t]),
                    geometry=e.geometry,
                    arch=st.archs[t],
                    method=e.method,
                    options=e.options,
                    weight=e.weight,
                    seed=0,
                    generation=t,
                    zeta=st.zeta[t],
                    old=chain[t - 1],
                    reference=indep[e.geometry][t],
                    epochs=st.epochs,
                ),
            )
        )
    return chain


def _matrices(
    bench: Bench, chain: list[BenchModel]
) -> tuple[dict[str, list[list[float | None]]], dict[str, dict[str, float | None]]]:
    """C[t][k] per compatibility metric (None where a model cannot query an older gallery) and its summary."""
    n = len(chain)
    matrices, summary = {}, {}
    for k in COMPAT_METRICS:
        mat = np.full((n, n), np.nan)
        for t in range(n):
            for j in range(t + 1):
                why = chain[t].test.incompatibility(chain[j].test)
                mat[t, j] = np.nan if why else bench.metrics(chain[t], chain[j])[k]
        matrices[k] = [[None if np.isnan(v) else float(v) for v in row] for row in mat]
        try:
            summary[k] = compat_summary(mat)
        except ValueError:  # some pair cannot be compared (e.g. a model that cannot query an older gallery)
            summary[k] = {"ac": None, "aa": None, "aca": None, "aca_given_compatible": None}
    return matrices, summary


def run_sequential(bench: Bench) -> SequentialResult:
    """Compatibility matrices C[t][k] = M(φ_t, φ_k), k ≤ t, and AC / AA / ACA per method."""
    s, p = bench.settings, bench.params
    t_stages, c = s.sequential_stages, bench.num_classes
    st = _Stages(
        classes=[list(range(round((t + 1) * c / t_stages))) for t in range(t_stages)],
        archs=[s.old_arch if t < s.sequential_switch_at else s.new_arch for t in range(t_stages)],
        zeta=[p.geometry.zeta0 + t * p.geometry.delta_zeta for t in range(t_stages)],
        epochs=s.scenario_epochs.get("sequential"),
    )
    entries = {m.name: m for m in s.methods}
    names = s.sequential_methods or ["independent"] + [m.name for m in s.methods]
    unknown = [n for n in names if n != "independent" and n not in entries]
    if unknown:
        raise ConfigError(f"sequential_methods {unknown} are not in the profile's methods; add them there first")
    geoms = {Euclidean.name} | {entries[n].geometry for n in names if n in entries}
    indep = {
        g: [
            bench.train_model(
                f"seq/independent/{g}/t{t}",
                ModelRequest(
                    bench.selection(st.classes[t]),
                    geometry=g,
                    arch=st.archs[t],
                    zeta=st.zeta[t],
                    epochs=st.epochs,
                    generation=t,
                    role="reference" if t else "model",  # stage 0 is the old model; later ones are the stages' φ*
                ),
            )
            for t in range(t_stages)
        ]
        for g in sorted(geoms)
    }
    chains: dict[str, list[BenchModel]] = {}
    seconds: dict[str, float] = {}
    for name in names:
        bench.log(f"[sequential] {name}")
        e = entries.get(name)
        if name == "independent" or e is None:
            chains[name], seconds[name] = indep[Euclidean.name], sum(m.seconds for m in indep[Euclidean.name])
        elif e.method in SIMPLEX:
            chains[name], seconds[name] = [m.view(e.method) for m in indep[Euclidean.name]], 0.0
        else:
            chains[name] = _method_chain(bench, name, e, st, indep)
            seconds[name] = sum(m.seconds for m in chains[name][1:])
    matrices, summary = {}, {}
    for name, chain in chains.items():
        matrices[name], summary[name] = _matrices(bench, chain)
    return SequentialResult(
        st.classes, [f"{a.backbone} {a.backbone_kwargs}" for a in st.archs], matrices, summary, seconds
    )
