"""Markdown summaries of a generation (Prefect artifacts) and the number format every view shares."""

from __future__ import annotations

from typing import Any

from components.evaluation import COMPAT_METRICS, REPORTED_METRICS, DerivedMetrics

__all__ = ["fmt", "generation_markdown"]


def fmt(v: float | None, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def generation_markdown(summary: dict[str, Any]) -> str:
    """A markdown summary of one generation (Prefect artifact)."""
    lines = [
        f"# bctflow generation {summary['generation']} ({summary['name']})",
        "",
        f"alignment **{summary['alignment']}**, geometry **{summary['geometry']}**, ζ = {fmt(summary['zeta'], 2)}, "
        f"parent {'—' if summary['parent'] is None else 'g' + str(summary['parent'])}, "
        f"MLflow {summary.get('mlflow_model')} v{summary.get('mlflow_version')}",
        "",
        *(
            [f"MLflow run: [{summary['mlflow_run_id']}]({summary['mlflow_run_url']})", ""]
            if summary.get("mlflow_run_url")
            else []
        ),
        "| comparison | CMC@1 | CMC@5 | mAP |",
        "|---|---:|---:|---:|",
    ]

    def row(name: str, vals: dict[str, float] | None) -> None:
        if vals:
            lines.append(f"| {name} | " + " | ".join(fmt(vals.get(k)) for k in REPORTED_METRICS) + " |")

    row("self", summary["self"])
    row("cross (vs parent gallery)", summary["cross"])
    row("parent self (old-old)", summary["parent_self"])
    if summary.get("reference"):
        row("reference self", summary["reference"]["self"])
        row("reference cross", summary["reference"]["cross"])
    d = DerivedMetrics.from_rows(summary.get("derived") or {})
    if d.parent_self:
        lines += ["", "| metric | P_com | denominator | P_up |", "|---|---:|---:|---:|"]
        for k in COMPAT_METRICS:
            lines.append(
                f"| {k} | {fmt(d.p_com.get(k), 3)} | {fmt(d.p_com_denominator.get(k))} | {fmt(d.p_up.get(k))} |"
            )
    b = summary["backfill"]
    lines += ["", f"**Backfill required: {'yes' if b['required'] else 'no'}**"] + [f"- {r}" for r in b["reasons"]]
    if summary.get("diagnostics"):
        lines += ["", "| diagnostic | value |", "|---|---:|"] + [
            f"| {k} | {fmt(v)} |" for k, v in summary["diagnostics"].items()
        ]
    return "\n".join(lines) + "\n"
