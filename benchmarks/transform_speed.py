"""``bctflow bench transform``: a gallery transform against a full re-embedding of the same corpus, in one run.

1. builds (once, cached) the scale benchmark's synthetic corpus of N images (:mod:`benchmarks.scale_corpus`);
2. ``bctflow run`` generation 0 with ``gallery:`` pointing at it (the corpus embedded and indexed: the live
   gallery), then generation 1, trained without alignment (a free model: the transform's case);
3. ``bctflow upgrade --generation 1 --route transform`` fits the map g0 → g1 on paired training items
   (``upgrade.paired_fraction`` of the live gallery) and records it;
4. ``bctflow backfill --generation 1 --transform``: every stored g0 vector carried into g1's space by the map;
5. ``bctflow backfill --generation 1``: the same corpus re-embedded by g1's model (the reference).

Both backfills run through the same machinery (parts, publish, verification, switch) on the same corpus, one after
the other in this run. Writes ``DIR/transform.json`` and ``DIR/report.md``. Keys (seconds ``_s``):

* ``transform_items_per_s`` / ``reembed_items_per_s``: each backfill's corpus rate from its log line (the rows
  after its first batch over their seconds), and ``items_per_s_ratio`` = transform / re-embedding;
* ``transform_backfill_s`` / ``reembed_backfill_s``: each whole command (Prefect's start, the plan, the carrying or
  embedding, the index build, the checks, the switch), and ``command_s_ratio`` = re-embedding / transform;
* ``transform_rows`` / ``transform_rows_stamped``: the corpus rows the transform published and how many carry its
  bridge's id (read back from the published store); ``bridge_fit_s``, ``paired_items``;
* ``transform_map`` / ``reembed_map``: the evaluation split's mAP after each (g1's queries; the lineage's events),
  and ``old_map``: g0's own gallery and queries, before either (as ``bctflow upgrade`` measured it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.report import provenance_lines, write_run_report
from benchmarks.scale import corpus_rate, fresh_workspace, run_child, scale_params
from benchmarks.scale_corpus import build_scale_corpus
from components.data.catalog import create_dataset
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.params import params_from_dict
from flows.runtime import Workspace

__all__ = ["RATIO_BAR", "run_transform_bench", "write_transform_report"]

#: the items/s a transform must reach, as a multiple of the full re-embedding's on the same corpus
RATIO_BAR = 20.0


def run_transform_bench(
    items: int,
    out: Path,
    *,
    work: Path,
    corpus_dir: Path,
    profile: str = "cpu",
    index_type: str = "flat",
    chunk_size: int = 8192,
    epochs: int = 2,
    workers: int | None = None,
    paired_fraction: float | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Measure a transform backfill and a full re-embedding of the same N-item corpus; write ``out/transform.json``
    and ``out/report.md`` (``paired_fraction``: of the live gallery, for the bridge; None: the profile's
    ``upgrade.paired_fraction``). Returns the md."""
    out.mkdir(parents=True, exist_ok=True)
    base = create_dataset("fashion_mnist", work.parent / "datasets", download=False).train.decode()
    build_scale_corpus(corpus_dir, items, base_images=base.images, base_labels=base.labels, image_size=16)
    raw = scale_params(profile, corpus_dir, index_type, chunk_size, epochs, workers, "faiss")
    raw["generations"][1] = {"name": "g1", "classes": "all", "alignment": "independent", "reference": False}
    if paired_fraction is not None:  # a small corpus: 1% of it may be fewer pairs than the map needs
        raw["upgrade"] = {**raw["upgrade"], "paired_fraction": paired_fraction}
    home, common = fresh_workspace(work, raw)
    params = params_from_dict(raw, "transform benchmark params")
    run_child(["run", *common, "--generation", "g0"], log)
    run_child(["run", *common, "--generation", "g1"], log)
    t0 = time.perf_counter()
    fit = run_child(["upgrade", *common, "--generation", "1", "--route", "transform"], log)
    fit_s = time.perf_counter() - t0
    paired = re.search(r"\((\w+), (\d+) paired items", fit["out"])
    old = re.search(r"the old gallery alone ([\d.]+)", fit["out"])
    carried = run_child(["backfill", *common, "--generation", "1", "--transform"], log)
    embedded = run_child(["backfill", *common, "--generation", "1"], log)
    n_carried, carried_rate = corpus_rate(carried["out"])
    n_embedded, embedded_rate = corpus_rate(embedded["out"])
    with Workspace(home).lineage(params, readonly=True) as store:
        transform, reembed = store.backfills()
        bridge_id = next(b.id for b in store.bridges() if b.role == "transform")
    published = GalleryParts(GalleryVersion.of_index(transform.index_path).serving().gallery)
    res: dict[str, Any] = {
        "items": items,
        "index_type": index_type,
        "chunk_size": chunk_size,
        "profile": profile,
        "epochs": epochs,
        "paired_fraction": paired_fraction,
        "map_kind": paired.group(1) if paired else None,
        "paired_items": int(paired.group(2)) if paired else None,
        "bridge_fit_s": fit_s,
        "transform_items": n_carried,
        "transform_items_per_s": carried_rate,
        "transform_backfill_s": carried["seconds"],
        "transform_peak_rss_mb": carried["peak_rss_mb"],
        "reembed_items": n_embedded,
        "reembed_items_per_s": embedded_rate,
        "reembed_backfill_s": embedded["seconds"],
        "reembed_peak_rss_mb": embedded["peak_rss_mb"],
        "items_per_s_ratio": carried_rate / embedded_rate,
        "command_s_ratio": embedded["seconds"] / carried["seconds"],
        "transform_kind": transform.kind,
        "transform_rows": len(published),
        "transform_rows_stamped": int((published.column("bridges") == bridge_id).sum()),
        "transform_map": transform.metrics.get("map"),
        "reembed_map": reembed.metrics.get("map"),
        "old_map": float(old.group(1)) if old else None,
    }
    return write_transform_report(res, out)


def write_transform_report(res: dict[str, Any], out: Path) -> Path:
    """``out/transform.json`` (``res`` and its provenance) and ``out/report.md``; returns the md."""
    return write_run_report(out, "transform.json", res, _report)


def _report(r: dict[str, Any]) -> str:
    def f(x: float | None, spec: str = ".4f") -> str:
        return "—" if x is None else format(x, spec)

    return "\n".join(
        [
            f"# A gallery transform against a full re-embedding: {r['items']:,} corpus items",
            "",
            f"`bctflow bench transform --items {r['items']} --index {r['index_type']} --chunk-size {r['chunk_size']} "
            f"--epochs {r['epochs']}"
            + (f" --paired-fraction {r['paired_fraction']}`" if r["paired_fraction"] else "`")
            + f" (profile {r['profile']}); both backfills of the same corpus, one after the other, in one run, "
            "through the same backfill machinery.",
            "",
            *(f"{line}\n" for line in provenance_lines(r, prefix="")),
            "| backfill | items | items/s (carrying / embedding) | whole command, s | peak RSS, MB | mAP after |",
            "|---|---:|---:|---:|---:|---:|",
            f"| transform (bridge {r['map_kind']}, {r['paired_items']} pairs) | {r['transform_items']:,} | "
            f"{f(r['transform_items_per_s'], ',.0f')} | {f(r['transform_backfill_s'], '.1f')} | "
            f"{f(r['transform_peak_rss_mb'], '.0f')} | {f(r['transform_map'])} |",
            f"| full re-embedding (g1's model) | {r['reembed_items']:,} | {f(r['reembed_items_per_s'], ',.0f')} | "
            f"{f(r['reembed_backfill_s'], '.1f')} | {f(r['reembed_peak_rss_mb'], '.0f')} | {f(r['reembed_map'])} |",
            "",
            f"* items/s, transform over re-embedding: **{r['items_per_s_ratio']:.1f}×** — the bar of 20× "
            f"{'reached' if r['items_per_s_ratio'] >= RATIO_BAR else 'not reached'}; "
            f"whole command, re-embedding over transform: {r['command_s_ratio']:.1f}× (both rebuild the index and run "
            "the same checks).",
            f"* the transform published {r['transform_rows']:,} corpus rows, {r['transform_rows_stamped']:,} of them "
            f"stamped with its bridge; event kind `{r['transform_kind']}`; fitting the bridge took "
            f"{r['bridge_fit_s']:.1f} s (`bctflow upgrade --route transform`).",
            f"* mAP of the evaluation split with g1's queries: after the transform {f(r['transform_map'])}, after "
            f"the re-embedding {f(r['reembed_map'])}; g0's own gallery and queries {f(r['old_map'])}.",
            "",
        ]
    )
