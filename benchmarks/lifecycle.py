"""`bctflow bench lifecycle`: every policy of the catalog over a season of nights, each in its own workspace running
the real product (docs/design.md §7.18, §11).

Night by night, for each policy: the night's new corpus items are ingested into the live gallery by the live
gallery's own model (``bctflow backfill --ingest``'s code), then the nightly flow runs — a generation aligned to the
live gallery's generation, evaluated, registered, decided (the shipped rules) and committed, then the policy's
``lifecycle-night`` — and what production's users get is measured: production's queries (the stream's held-out
labelled queries, through the lineage's adapter chain where the gallery needs one) against the live serving corpus,
mixed galleries included, mAP@all and CMC@1 as the query service ranks (``serve.merge: none``: one query over every
stored vector). Policies whose live galleries hold the same generation train the same model that night: the
trained-model cache (``train.cache_dir``) hands it over instead of training it again.

Judged afterwards (:mod:`benchmarks.lifecycle_report`): the served-mAP area and the compute of each policy, and
each backfill rule's precision and recall against the measured need (the ``never`` and ``always`` workspaces give
both sides of every night).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from benchmarks.lifecycle_stream import Night, StreamSettings, corpus_manifest, night_plan, queries, write_corpus
from benchmarks.profile import MEASURED_DEFAULTS
from components.bridges.base import Bridge
from components.bridges.chain import BridgeChain
from components.data.sources.catalog import create_source
from components.data.sources.split import SourceDataset
from components.data.sources.writer import encode_image, write_manifest
from components.errors import ConfigError, LineageError
from components.evaluation.retrieval import retrieval_metrics
from components.geometry.spaces.euclidean import Euclidean
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.backfill import backfill, new_corpus_items, plan_backfill
from flows.gallery import GallerySource, dataset_splits, embed_gallery
from flows.lifecycle import list_policies, nightly_generation
from flows.params import Params, apply_overrides, load_params
from flows.runtime import Workspace

__all__ = ["LINEAGES", "run_lifecycle", "stream_settings"]

#: the lineages the benchmark runs: the ζ lineage it was measured with (Lorentz, the defaults the profiles were measured
#: with too, :data:`~benchmarks.profile.MEASURED_DEFAULTS`: HBCT at λ 0.3 on the hard-clip head, docs/methods.md) and
#: the Euclidean one the method tables recommend (bct on the linear head, λ 3)
LINEAGES: dict[str, list[str]] = {
    # the project's s = 4 Lorentz MLR scale (docs/design.md §3.4), over the measured defaults' s = 1: at this budget
    # the paper's s = 1 head left g0 at 0.40 train accuracy after 4 of 6 epochs (loss ≈ ln 4, logits too small to learn
    # from), s = 4 at 0.92 after 10
    "zeta": [*(f"{key}={value}" for key, value in MEASURED_DEFAULTS.items()), "model.mlr_scale=4.0"],
    Euclidean.name: [
        f"model.geometry={Euclidean.name}",
        "alignment.method=bct",
        "alignment.weight=3.0",
        "model.classifier=linear",
        "model.bn_neck=false",
        "model.classifier_scale=1.0",
        "backfill.order=random",
    ],
}


def stream_settings(raw: dict[str, Any] | None, nights: int | None, policies: list[str] | None) -> StreamSettings:
    """The stream as a profile's ``lifecycle:`` section and the command's ``--nights`` / ``--policies`` ask for it;
    ConfigError in one line for fewer than 2 nights or an unknown policy (checked before anything starts)."""
    over: dict[str, Any] = dict(raw or {})
    if nights is not None:
        if nights < 2:
            raise ConfigError(f"--nights {nights}: a lifecycle needs at least 2 nights (generation 0, then one update)")
        over["nights"] = nights
        for key in ("arch_night", "degraded_night"):  # a shorter season keeps the special nights that fit
            default = StreamSettings.model_fields[key].default
            if over.get(key, default) is not None and over.get(key, default) >= nights:
                over[key] = None
    if policies is not None:
        unknown = sorted(set(policies) - set(list_policies()))
        if unknown:
            raise ConfigError(f"unknown policies {unknown}; use any of {', '.join(list_policies())}")
        over["policies"] = policies
    try:
        return StreamSettings.model_validate(over)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "lifecycle"
        raise ConfigError(
            f"the profile's lifecycle.{where}: {first['msg']}; fix the profile's lifecycle: section"
        ) from None


def _query_source(params: Params, s: StreamSettings, home: Path) -> GallerySource:
    """The held-out queries as PNG files and a manifest (written once), as a gallery source at the models' size."""
    raw = dataset_splits(apply_overrides(params, ["data.image_size=null", "data.max_train_per_class=null",
                                                  "data.max_test_per_class=null"]), home / "datasets")  # fmt: skip
    test = raw.test.decode()
    pos = queries(params, s, test.labels)
    folder = home / "queries"
    if not (folder / "queries.csv").exists():
        (folder / "images").mkdir(parents=True, exist_ok=True)
        for p in pos.tolist():
            (folder / "images" / f"{int(test.ids[p])}.png").write_bytes(encode_image(test.images[p], "png"))
        write_manifest(folder / "queries.csv", [f"images/{int(test.ids[p])}.png" for p in pos.tolist()],
                       ids=test.ids[pos], labels=test.labels[pos])  # fmt: skip
    size = params.data.image_size or int(test.images.shape[1])
    return GallerySource("manifest", SourceDataset(create_source("manifest", folder / "queries.csv"), size), 0)


def _query_embeddings(params: Params, source: GallerySource, checkpoint: str, generation: int,
                      cache: Path) -> GalleryEmbeddings:  # fmt: skip
    """The queries embedded by a generation's model, once per checkpoint (kept under ``cache``)."""
    out = cache / Path(checkpoint).resolve().as_posix().replace("/", "_")
    done = embed_gallery(params, source, Path(checkpoint), out, generation=generation, crash_points=False)
    return done.store.embeddings()


def _served(params: Params, ws: Workspace, source: GallerySource, cache: Path) -> dict[str, Any]:
    """What production's users get tonight: production's queries (through the adapter chain the lineage records
    where the live gallery does not accept them) ranked over every vector of the live serving corpus."""
    with ws.lineage(params, readonly=True) as store:
        ptr = store.live_pointer()
        assert ptr is not None
        production = store.production_generation_id()
        production = ptr.generation_id if production is None else production
        accepted = list(ptr.compatible_generations or [ptr.generation_id])
        chain = None
        if production not in accepted:
            for target in accepted:
                try:
                    links = store.bridge_chain(production, target, "adapter")
                except LineageError:
                    continue
                chain = BridgeChain(tuple(Bridge.load(Path(b.path), sha256=b.sha256) for b in links))
                break
        prod = store.generation(production)
        live = store.generation(ptr.generation_id)
    own = production == ptr.generation_id  # the gallery's own model: the pointer's copy (rescaled after a ζ restart)
    checkpoint = (ptr.model_checkpoint or prod.checkpoint_path) if own else prod.checkpoint_path
    q = _query_embeddings(params, source, checkpoint, production, cache)
    if chain is not None:
        q = chain.map_gallery(q)
    corpus = GalleryParts(GalleryVersion.of_index(ptr.index_path).serving().gallery)
    gallery = corpus.embeddings()
    stamps = corpus.column("stamps")
    space = gallery.retrieval_space
    m = retrieval_metrics(q.vectors(gallery.curvature), q.labels, q.ids, gallery.vectors(), gallery.labels,
                          gallery.ids, space, ks=(1,), leave_one_out=False)  # fmt: skip
    old_ckpt = ptr.model_checkpoint or live.checkpoint_path
    oq = _query_embeddings(params, source, old_ckpt, live.id, cache)
    old = retrieval_metrics(oq.vectors(gallery.curvature), oq.labels, oq.ids, gallery.vectors(), gallery.labels,
                            gallery.ids, space, ks=(1,), leave_one_out=False)  # fmt: skip
    return {
        "served_map": float(m["map"]),
        "served_cmc1": float(m["cmc@1"]),
        "old_old_map": float(old["map"]),
        "production": int(production),
        "live_generation": int(ptr.generation_id),
        "gallery_items": len(gallery),
        "gallery_mix": {str(int(g)): int((stamps == g).sum()) for g in np.unique(stamps)},
        "adapter": chain is not None,
    }


def _write_params(base: Params, path: Path, home: Path, policy: str, s: StreamSettings, lineage: list[str]) -> Path:
    overrides = [
        f"data.root={home / 'datasets'}",
        f"train.cache_dir={home / 'models'}",
        f"train.epochs={s.epochs}",
        "gallery.source=manifest",
        f"gallery.path={home / 'corpus' / 'corpus.csv'}",
        f"lifecycle.policy={policy}",
        f"lifecycle.budget_items={s.budget_items}",
        f"lifecycle.every_k={s.every_k}",
        "evaluation.reference=false",
        "backfill.rules.max_generations_since_backfill=3",  # judged with the others (off by default)
        *s.params,
        *lineage,
    ]
    p = apply_overrides(base, overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(p.as_dict(), sort_keys=False))
    return path


def _night(p: Params, params_file: Path, ws_home: Path, night: Night, t: int,
           log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """Night ``t`` of one policy's workspace (``p``: ``params_file`` with the night's overrides): ingest, then the
    nightly run. Returns what the night did."""
    ws = Workspace(ws_home)
    ingested = 0
    t0 = time.perf_counter()
    # new items wait while a re-embedding spread over nights is unfinished (one backfill at a time): its version
    # goes live without them and the next night's ingest adds them, embedded by that version's model
    if t > 0 and not (ws.backfill_in_progress / "plan.json").exists():
        with ws.lineage(p, readonly=True) as store:
            ptr = store.live_pointer()
            assert ptr is not None
            new, _ = new_corpus_items(p, ws, GalleryVersion.of_index(ptr.index_path))
        if new:
            backfill(plan_backfill(p, ws, ingest=True))
            ingested = new
    res = nightly_generation(home=str(ws_home), params_path=str(params_file), overrides=night.overrides,
                             spec=night.spec, night=f"night-{t:02d}")  # fmt: skip
    log(f"  night {t} ({night.kind}): " + (res.get("night", {}).get("action", "generation 0") or ""))
    return {"ingested": ingested, "seconds": time.perf_counter() - t0, "nightly": _plain(res)}


def _plain(obj: Any) -> Any:
    """A flow's result as JSON (the lineage block dropped: the report reads the lineage itself)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if k != "lineage"}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj if isinstance(obj, str | int | float | bool | type(None)) else str(obj)


def _resumable(raw_path: Path, s: StreamSettings, lineage: str, log: Callable[[str], None]) -> dict[str, Any] | None:
    """The record a stopped run of the same stream and lineage kept (each policy's finished nights), else None."""
    if not raw_path.is_file():
        return None
    record = json.loads(raw_path.read_text())
    if record.get("settings") != s.model_dump(mode="json") or record.get("lineage") != lineage:
        return None
    done = sum(len(e["policies"]) for e in record["nights"])
    log(f"resuming the season kept in {raw_path}: {done} policy-nights done")
    record.setdefault("resumed", []).append(time.time())
    return record


def run_lifecycle(base: Params, *, home: Path, out: Path, lineage: str, raw_settings: dict[str, Any] | None,
                  nights: int | None, policies: list[str] | None,
                  log: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """Run the stream for every policy (night-major: every policy's night t before any night t+1) and return the raw
    record (what :mod:`benchmarks.lifecycle_report` judges). ``home``: the benchmark's scratch folder; ``out``: where
    the record is kept as it grows (``lifecycle.json`` is written by the report)."""
    if lineage not in LINEAGES:
        raise ConfigError(f"unknown lineage {lineage!r}; use one of {', '.join(LINEAGES)}")
    s = stream_settings(raw_settings, nights, policies)
    if base.data.dataset != "fashion_mnist":
        log(f"note: the stream runs on {base.data.dataset} (the cpu profile's is fashion_mnist)")
    home = home / lineage
    raw = dataset_splits(apply_overrides(base, ["data.image_size=null", "data.max_train_per_class=null",
                                                "data.max_test_per_class=null", f"data.root={home / 'datasets'}"]),
                         home / "datasets")  # fmt: skip
    train = raw.train.decode()
    pos, corpus_dir = write_corpus(base, s, train.images, train.labels, train.ids, home / "corpus")
    plan = night_plan(s, int(train.labels.max()) + 1)
    files = {p: _write_params(base, home / p / "params.yaml", home, p, s, LINEAGES[lineage]) for p in s.policies}
    ref = apply_overrides(base, [f"data.root={home / 'datasets'}", *s.params, *LINEAGES[lineage]])
    source = _query_source(ref, s, home)
    raw_path = out / "lifecycle.raw.json"
    record = _resumable(raw_path, s, lineage, log) or {
        "settings": s.model_dump(mode="json"),
        "lineage": lineage,
        "nights": [],
        "started": time.time(),
    }
    for t, night in enumerate(plan):
        if t == len(record["nights"]):
            record["nights"].append({"t": t, "kind": night.kind, "corpus": night.corpus, "policies": {}})
        entry = record["nights"][t]
        if set(entry["policies"]) == set(s.policies):
            continue  # done before the command was stopped
        corpus_manifest(corpus_dir, pos, train.labels, train.ids, night.corpus)
        log(f"night {t}: {night.kind}, classes 0–{night.classes[-1]}, {night.per_class}/class, corpus {night.corpus}")
        for policy in s.policies:
            if policy in entry["policies"]:
                continue
            ws_home = home / policy / "ws"
            p = load_params(files[policy], night.overrides)
            did = _night(p, files[policy], ws_home, night, t, log)
            did["served"] = _served(p, Workspace(ws_home), source, home / "query_embeddings")
            entry["policies"][policy] = did
            log(f"    {policy}: served mAP {did['served']['served_map']:.4f} ({did['seconds']:.0f} s)")
            out.mkdir(parents=True, exist_ok=True)  # kept after every policy's night: a stopped run resumes here
            raw_path.write_text(json.dumps(record, indent=1, default=str))
    record["seconds"] = time.time() - record["started"]
    record["homes"] = {p: str(home / p / "ws") for p in s.policies}
    record["params_files"] = {p: str(f) for p, f in files.items()}
    return record
