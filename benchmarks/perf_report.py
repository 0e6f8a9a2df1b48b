"""The markdown report of ``bctflow bench perf`` (benchmarks/perf.py): one row per measured ratio, both sides."""

from __future__ import annotations

from typing import Any

from benchmarks.report import provenance_lines

__all__ = ["perf_report"]


def _pair_rows(perf: dict[str, Any]) -> list[tuple[str, Any, str, str]]:
    """(ratio, value, project side, baseline side) per measured ratio."""
    t, e, v, k, f = (perf.get(x) or {} for x in ("training", "embedding", "evaluation", "knn", "flow"))
    rows = [
        ("train_vs_bare", t.get("train_vs_bare"), f"{t.get('project_img_s')} img/s", f"{t.get('bare_img_s')} img/s"),
        (
            "aligned_vs_independent",
            t.get("aligned_vs_independent"),
            f"{t.get('hbct_img_s')} img/s (hbct)",
            f"{t.get('project_img_s')} img/s (independent)",
        ),
        ("embed_vs_bare", e.get("embed_vs_bare"), f"{e.get('project_img_s')} img/s", f"{e.get('bare_img_s')} img/s"),
        ("eval_10k_vs_matmul", v.get("eval_10k_vs_matmul"), f"{v.get('eval_s')} s", f"{v.get('matmul_s')} s"),
        ("knn_lorentz_vs_cosine", k.get("knn_lorentz_vs_cosine"), f"{k.get('lorentz_s')} s", f"{k.get('cosine_s')} s"),
    ]
    if t.get("compiled_vs_eager") is not None:
        rows.append(
            (
                "compiled_vs_eager",
                t.get("compiled_vs_eager"),
                f"{t.get('project_img_s')} img/s ({t.get('compile')})",
                f"{t.get('project_eager_img_s')} img/s (eager)",
            )
        )
    if f:
        rows.append(
            (
                "flow_wall_vs_compute",
                f.get("flow_wall_vs_compute"),
                f"{f.get('wall_s')} s wall",
                f"{f.get('compute_s')} s training",
            )
        )
    return rows


def perf_report(perf: dict[str, Any]) -> str:
    lines = [
        "# bctflow bench perf",
        "",
        f"- command: `{perf['command']}`",
        f"- device: {perf['device']}; precision {perf['precision']}; compile {perf['training'].get('compile', 'off')};"
        f" torch {perf['torch']}",
        f"- date: {perf['date']}; total wall time {perf['seconds'] / 60:.1f} min",
        *provenance_lines(perf),
        "",
        "Each ratio compares two measurements taken alternately in this one run (best of the repeats); "
        "benchmarks/perf.py says what each side is.",
        "",
        "| ratio | value | project side | baseline side |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _pair_rows(perf)]
    return "\n".join(lines) + "\n"
