"""The lifecycle benchmark's judgement: each policy's served quality over the season against its compute, and each
backfill rule's precision and recall against the measured need (docs/design.md §11) — ``lifecycle.json``,
``report.md`` and two plots (also logged as MLflow artifacts by the command).

The need, per night t ≥ 1: a backfill was needed when, without one, production's served mAP fell below the old-old
level (the live gallery's own generation on it) or below ``need_ratio`` × what a full backfill gave that night —
the ``never`` workspace's night is the first side, the ``always`` workspace's the second. A rule's flags are the
checks the shipped rules recorded for the ``never`` workspace's generation that night (the live gallery never
re-embedded: the state the need is defined on); ``backfill_required`` is the shipped decision (any rule failing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.backfill import vetoed
from flows.params import load_params
from flows.runtime import Workspace, describe_run, provenance_line

__all__ = ["RULE_NAMES", "judge", "log_lifecycle_run", "write_lifecycle_report"]

#: the rules judged: the shipped decision and each rule alone (its check's name in the recorded decision)
RULE_NAMES = (
    "backfill_required",
    "compatibility",
    "clip_fraction_max",
    "zeta_ceiling",
    "max_generations_since_backfill",
)


def _lineage(home: str, params_file: str) -> dict[str, Any]:
    p = load_params(params_file)
    ws = Workspace(Path(home))
    with ws.lineage(p, readonly=True) as store:
        gens = {g.id: g for g in store.generations()}
        nights = {n.night: n for n in store.nights.all()}
        decisions = {g: store.decision(g) for g in gens}
        backfills = store.backfills()
        promotions = store.to_json()
    promoted = {g["id"] for g in promotions for pr in g.get("promotions", []) if g["id"] != 0 and pr}
    return {"gens": gens, "nights": nights, "decisions": decisions, "backfills": backfills, "promoted": promoted}


def _flags(decision: Any) -> dict[str, bool]:
    """Each judged rule's "required" flag from a recorded decision (a rule that did not run: not flagged)."""
    if decision is None:
        return dict.fromkeys(RULE_NAMES, False)
    out = {"backfill_required": bool(decision.required)}
    for c in decision.checks or []:
        out[c["rule"]] = not c["passed"]
    return {k: out.get(k, False) for k in RULE_NAMES}


def _precision_recall(flags: list[bool], need: list[bool]) -> dict[str, Any]:
    tp = sum(f and n for f, n in zip(flags, need))
    fp = sum(f and not n for f, n in zip(flags, need))
    fn = sum(n and not f for f, n in zip(flags, need))
    return {
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "flagged": tp + fp,
        "needed": tp + fn,
        "true_positives": tp,
    }


def judge(record: dict[str, Any]) -> dict[str, Any]:
    """``lifecycle.json``'s body from the raw record and the workspaces' lineages."""
    s = record["settings"]
    nights = record["nights"]
    policies = list(s["policies"])
    lineages = {p: _lineage(record["homes"][p], record["params_files"][p]) for p in policies}
    degraded_t = s.get("degraded_night")
    arch_t = s.get("arch_night")
    out: dict[str, Any] = {"nights": len(nights), "lineage": record["lineage"], "policies": {}, "rules": {}}
    for p in policies:
        lin = lineages[p]
        per_night = []
        for entry in nights:
            did = entry["policies"][p]
            key = f"night-{entry['t']:02d}"
            row = lin["nights"].get(key)
            per_night.append(
                {
                    "night": entry["t"],
                    "kind": entry["kind"],
                    "action": "generation 0"
                    if row is None
                    else (
                        row.action
                        if row.fraction is None or row.action in ("full", "keep", "promote")
                        else f"{row.action} {row.fraction:.0%}"
                    ),
                    "reason": "" if row is None else row.reason,
                    "served_map": did["served"]["served_map"],
                    "served_cmc1": did["served"]["served_cmc1"],
                    "old_old_map": did["served"]["old_old_map"],
                    "forecast_map": None if row is None else row.forecast_map,
                    "outcome_map": None if row is None else row.outcome_map,
                    "items_reembedded": 0 if row is None else int(row.items),
                    "ingested": did["ingested"],
                    "compute_s": 0.0 if row is None else float(row.compute_s),
                    "production": did["served"]["production"],
                    "gallery_mix": did["served"]["gallery_mix"],
                }
            )
        degraded_gen = degraded_t  # night t trains generation t in every workspace (one generation a night)
        out["policies"][p] = {
            "served_map_area": sum(n["served_map"] for n in per_night) / len(per_night),
            "items_reembedded": sum(n["items_reembedded"] for n in per_night),
            "compute_s": sum(n["compute_s"] for n in per_night),
            "backfills": sum(1 for b in lin["backfills"] if b.kind in ("full", "partial", "transform")),
            "promotions": len(lin["promoted"]),
            "degraded_promoted": degraded_gen is not None and any(n["production"] == degraded_gen for n in per_night),
            "arch_night": None
            if arch_t is None
            else {
                "action": per_night[arch_t]["action"],
                "served_map": per_night[arch_t]["served_map"],
                "old_old_map": per_night[arch_t]["old_old_map"],
            },
            "per_night": per_night,
        }
    if "never" in policies and "always" in policies:
        never, always = out["policies"]["never"]["per_night"], out["policies"]["always"]["per_night"]
        ratio = s["need_ratio"]
        need = [
            n["served_map"] < n["old_old_map"] or n["served_map"] < ratio * a["served_map"]
            for n, a in zip(never[1:], always[1:])
        ]
        decisions = lineages["never"]["decisions"]
        flags = {r: [_flags(decisions.get(t))[r] for t in range(1, len(nights))] for r in RULE_NAMES}
        out["need"] = need
        out["rules"] = {r: _precision_recall(f, need) | {"flags": f} for r, f in flags.items()}
        recorded = {t: d.checks or [] for t, d in decisions.items() if d is not None}
        out["not_worse_vetoes"] = [t for t in range(1, len(nights)) if vetoed(recorded.get(t, []))]
    pol = out["policies"]
    if {"budget", "always", "never"} <= set(pol):  # the recommended policy against both ends, one denominator
        b, a, n = pol["budget"], pol["always"], pol["never"]
        out["budget_against"] = {
            "area_ratio_to_always": b["served_map_area"] / a["served_map_area"],
            "items_ratio_to_always": b["items_reembedded"] / a["items_reembedded"] if a["items_reembedded"] else None,
            "area_minus_never": b["served_map_area"] - n["served_map_area"],
        }
    return out


def _plots(doc: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for p, r in doc["policies"].items():
        ax.plot([n["night"] for n in r["per_night"]], [n["served_map"] for n in r["per_night"]], marker="o", label=p)
    ax.set_xlabel("night")
    ax.set_ylabel("served mAP (production's queries, live corpus)")
    ax.set_title(f"served quality per night ({doc['lineage']} lineage)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "served_map.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for p, r in doc["policies"].items():
        ax.scatter(r["items_reembedded"], r["served_map_area"], s=40)
        ax.annotate(
            p, (r["items_reembedded"], r["served_map_area"]), fontsize=8, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xlabel("items re-embedded over the season")
    ax.set_ylabel("served-mAP area (mean over nights)")
    ax.set_title("quality against cost")
    fig.tight_layout()
    paths.append(out / "quality_vs_cost.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _markdown(doc: dict[str, Any], command: str) -> str:
    lines = [
        f"# Lifecycle benchmark: {doc['lineage']} lineage, {doc['nights']} nights",
        "",
        f"`{command}`",
        "",
        provenance_line(doc["provenance"]),
        "",
        "## Policies",
        "",
        "| policy | served-mAP area | items re-embedded | compute s | backfills | promotions | degraded promoted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p, r in doc["policies"].items():
        lines.append(
            f"| {p} | {r['served_map_area']:.4f} | {r['items_reembedded']:,} | {r['compute_s']:.0f} | "
            f"{r['backfills']} | {r['promotions']} | {'yes' if r['degraded_promoted'] else 'no'} |"
        )
    if doc.get("budget_against"):
        ba = doc["budget_against"]
        lines += [
            "",
            f"budget against always (the one denominator): served-mAP area × {ba['area_ratio_to_always']:.3f}, items "
            f"re-embedded × {_fmt(ba['items_ratio_to_always'])}; against never: area {ba['area_minus_never']:+.4f}",
        ]
    lines += ["", "![served mAP per night](served_map.png) ![quality against cost](quality_vs_cost.png)", ""]
    for p, r in doc["policies"].items():
        lines += [
            f"### {p}",
            "",
            "| night | new | action | served mAP | old-old | forecast | outcome | re-embedded |",
            "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for n in r["per_night"]:
            lines.append(
                f"| {n['night']} | {n['kind']} | {n['action']} | {n['served_map']:.4f} | "
                f"{n['old_old_map']:.4f} | {_fmt(n['forecast_map'])} | {_fmt(n['outcome_map'])} | "
                f"{n['items_reembedded']:,} |"
            )
        lines.append("")
    if doc.get("rules"):
        lines += [
            "## The backfill rules judged",
            "",
            f"Nights that needed a backfill: {doc['need']}",
            "",
            "| rule | precision | recall | flagged | needed |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name, r in doc["rules"].items():
            lines.append(
                f"| {name} | {_fmt(r['precision'], 2)} | {_fmt(r['recall'], 2)} | {r['flagged']} | {r['needed']} |"
            )
        lines += ["", f"Nights whose generation the not_worse check vetoed: {doc.get('not_worse_vetoes')}"]
    return "\n".join(lines) + "\n"


def write_lifecycle_report(record: dict[str, Any], out: Path, command: str) -> Path:
    """Judge the record, write ``lifecycle.json`` (with provenance), the plots and ``report.md``; the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    doc = judge(record) | {
        "provenance": describe_run(),
        "seconds": record.get("seconds"),
        "settings": record["settings"],
        "command": command,
    }
    (out / "lifecycle.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    _plots(doc, out)
    md = out / "report.md"
    md.write_text(_markdown(doc, command))
    return md


def log_lifecycle_run(out: Path, tracking_uri: str) -> str:
    """The report as an MLflow run of the experiment ``bctflow-lifecycle`` at ``tracking_uri``: each policy's
    served-mAP area, items re-embedded and compute as metrics, each rule's precision and recall, the report, the JSON
    and the plots as artifacts. Returns the run id."""
    import mlflow

    from registry.tracking.common import quiet_mlflow

    doc = json.loads((out / "lifecycle.json").read_text())
    with quiet_mlflow():
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment("bctflow-lifecycle")
        with mlflow.start_run(run_name=f"lifecycle-{doc['lineage']}-{doc['nights']}-nights") as run:
            mlflow.set_tags(
                {"bctflow.lifecycle.lineage": doc["lineage"], "bctflow.commit": str(doc["provenance"]["commit"])}
            )
            for p, r in doc["policies"].items():
                mlflow.log_metrics(
                    {
                        f"{p}/served_map_area": r["served_map_area"],
                        f"{p}/items_reembedded": float(r["items_reembedded"]),
                        f"{p}/compute_s": r["compute_s"],
                    }
                )
                for n in r["per_night"]:
                    mlflow.log_metric(f"{p}/served_map", n["served_map"], step=n["night"])
            for name, r in doc.get("rules", {}).items():
                mlflow.log_metrics({f"rule/{name}/{k}": r[k] for k in ("precision", "recall") if r[k] is not None})
            for f in ("report.md", "lifecycle.json", "served_map.png", "quality_vs_cost.png"):
                mlflow.log_artifact(str(out / f))
            return str(run.info.run_id)
