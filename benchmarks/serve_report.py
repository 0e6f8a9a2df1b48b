"""The serving benchmark's report: the swap run's latency around the switch, and ``report.md`` from ``serve.json``'s
values (:mod:`benchmarks.serve` measures them)."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.report import provenance_lines
from benchmarks.serve_load import percentile_ms

__all__ = ["render_report", "swap_timeline"]


def swap_timeline(load: Any, at: float, first: float, step: float = 0.25) -> list[dict[str, float]]:
    """The swap run in ``step``-second buckets around the switch (``at``) and the first new answer (``first``): each
    bucket's start (s since the switch), requests started in it, their p50 and p99 (ms) — where a slow window sits."""
    out = []
    t = max(0.0, at - 2.0)
    while t < first + 2.0:
        bucket = [s for s in load.window(t, t + step) if s.status == 200]
        p50, p99 = percentile_ms(bucket, 50), percentile_ms(bucket, 99)
        out.append({"t": round(t - at, 3), "n": len(bucket), "p50": p50, "p99": p99})
        t += step
    return out


def render_report(r: dict[str, Any], command: str) -> str:
    def f(k: str) -> str:
        v = r[k]
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    checks = [
        ("failed_requests = 0", r["failed_requests"] == 0),
        ("mixed_responses = 0", r["mixed_responses"] == 0),
        ("swap_p99_ms ≤ 1.2 × steady_p99_ms", r["swap_p99_ms"] <= 1.2 * r["steady_p99_ms"]),
        ("every incompatible query refused (409)", r["refused_incompatible"] == r["incompatible_queries"]),
        ("vector_vs_inprocess ≥ 0.3 (in-process at the mean served batch)", r["vector_vs_inprocess"] >= 0.3),
        ("vector_vs_inprocess_batch1 ≥ 0.3 (in-process at one query per call)", r["vector_vs_inprocess_batch1"] >= 0.3),
        ("image_vs_bare ≥ 0.8", r["image_vs_bare"] >= 0.8),
    ]
    lines = [
        f"# Serving benchmark: {r['items']:,} items, index {r['index_type']}, concurrency {r['concurrency']} (vector "
        f"queries), {r['image_concurrency']} (image queries)",
        "",
        f"Command: `{command}` (one run, loopback, {r['cpu_cores']} CPU cores).",
        "",
        *(f"{line}\n" for line in provenance_lines(r, prefix="")),
        *(
            [
                f"The workspace (g0, g1 and g1's published backfill, not yet switched) was prepared by an earlier run "
                f"with the same params at {r['prepared_at']} and copied back (`--reuse`); every measurement below is "
                "this run's.",
                "",
            ]
            if r.get("reused_preparation")
            else []
        ),
        "| check | holds |",
        "|---|---|",
        *(f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in checks),
        "",
        "| key | value |",
        "|---|---|",
        *(f"| `{k}` | {f(k)} |" for k in r if not isinstance(r[k], dict | list)),
        "",
        f"Where the CPU goes (image queries): the service spent {f('image_service_cpu_ms')} ms of CPU per query, of "
        f"which the forward is {f('forward_cpu_ms_per_item')} ms (the bare forward per item at the same batch size, "
        f"{r['torch_threads']} torch thread); the rest is HTTP, routing, decoding, batching, search and JSON. The load "
        f"generator spent {f('image_client_cpu_ms')} ms per query on the same cores. Load average (1 min) "
        f"{f('load_average_1m_at_start')} when the measurements began, {f('load_average_1m_at_end')} at the end.",
        "",
        f"Vector queries: each request carries one query; the service batches concurrent ones (mean "
        f"{f('mean_vector_batch')} per FAISS call), so it is compared with the index searched in-process at that "
        f"batch ({f('inprocess_search_qps')} q/s) and at one query per call ({f('inprocess_search_qps_batch1')} q/s). "
        f"The service spent {f('vector_service_cpu_ms')} ms of CPU per vector query, the load generator "
        f"{f('vector_client_cpu_ms')} ms.",
        "",
        f"After the swap: {json.dumps(r['after_swap'])}. The backfill's switch took "
        f"{r['switch_s']:.2f} s (the lineage commit, live/CURRENT, the MLflow aliases); the "
        "service's log of its versions:",
        "",
        *(f"    {line}" for line in r["service_swap_log"]),
        "",
        "The swap run in 0.25 s buckets (t: seconds since the switch; the new version first answered at "
        f"t = {r['swap_s']:.2f} s):",
        "",
        "| t (s) | requests | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|",
        *(f"| {b['t']:+.2f} | {b['n']} | {b['p50']:.1f} | {b['p99']:.1f} |" for b in r.get("swap_timeline", [])),
        "",
    ]
    return "\n".join(lines)
