"""``bctflow bench serve``: the query service under a bounded load on loopback, over a gallery of the scale corpus.

1. the scale corpus (:mod:`benchmarks.scale_corpus`, its images ``image_size`` square: the profile's
   ``data.image_size`` unless given) and ``bctflow run`` g0 (its gallery, indexed with ``--index``) and g1; a full
   backfill with g1 re-embedded and published beforehand, not yet switched (kept, and with ``--reuse`` taken from
   an earlier run with the same params: :func:`benchmarks.serve_prepare.prepare`);
2. ``bctflow serve`` started as a real process on a free loopback port;
3. vector queries at ``concurrency`` → ``vector_qps`` / p50 / p99, against ``inprocess_search_qps`` (the same index
   searched in this process, queries per call = the mean served vector batch, read from ``/metrics``; also
   ``inprocess_search_qps_batch1``, one query per call — the shape each request carries — beside it:
   ``vector_vs_inprocess_batch1``);
4. image queries at ``image_concurrency`` (two batches' worth by default: the batcher embeds one batch while it
   collects the next) → ``image_qps`` / p99 with dynamic batching, against ``bare_forward_qps`` (the model's bare
   batched forward at the mean served batch size, read from ``/metrics``);
5. image queries (at ``image_concurrency``) while the backfill's switch (a child process, which also promotes g1)
   moves the live pointer: ``steady_p99_ms`` (before) vs ``swap_p99_ms`` (from the switch until 1 s after the first
   answer of the new version), ``failed_requests``, ``mixed_responses``, ``swap_s``, ``switch_s`` (the switch call
   itself) and the service's log of its versions;
6. ``refused_incompatible``: generation 0 vectors against the backfilled gallery (all must get 409).

Each baseline is measured just before and just after its load and the two averaged (the machines here drift by
up to 15% between measurements seconds apart). Both sides of a ratio run torch with ``_TORCH_THREADS`` intra-op
threads. ``*_service_cpu_ms`` / ``*_client_cpu_ms``: CPU milliseconds per query of the service process and of the
load generator (both on the same cores); ``forward_cpu_ms_per_item``: the bare forward's; ``load_average_1m_*``: the
machine's load around the measurements.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from benchmarks.profile import load_profile
from benchmarks.report import write_run_report
from benchmarks.scale import scale_params
from benchmarks.scale_corpus import build_scale_corpus
from benchmarks.serve_load import Request, percentile_ms, run_load
from benchmarks.serve_prepare import prepare
from benchmarks.serve_report import render_report, swap_timeline
from components.data.catalog import create_dataset
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.stores.faiss import GalleryIndex
from components.indexing.version import GalleryVersion

__all__ = ["corpus_image_size", "run_serve_bench", "write_serve_report"]

#: torch's intra-op (and FAISS's OpenMP) threads, the service's and the in-process baselines' alike: on 2 cores shared
#: with the load generator (and other work) a 2-thread forward's spinning threads lose their core and crawl (12–2,300
#: items/s measured from one run to the next; in-process HNSW search 1,320 vs 10,110 q/s); one thread is steady
_TORCH_THREADS = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def corpus_image_size(profile: str, given: int | None) -> int:
    """The side of the corpus's images: ``given``, else the profile's ``data.image_size`` (16 where it has none)."""
    return given or int(load_profile(profile)[1].data.image_size or 16)


def _switch_when_told(plan: Any, index_dir: str, metrics: dict, ready: Any, go: Any, done: Any) -> None:
    """Child process: import and open everything first, then switch the live pointer when told; ``done``: when the
    switch returned (``time.perf_counter``, the machine's monotonic clock, which the load's samples share)."""
    from flows.backfill import switch

    plan.workspace.tracking(plan.params).prepare()  # MLflow imported, its store opened (tracking() alone is lazy)
    ready.set()
    go.wait()
    switch(plan, Path(index_dir), metrics)
    done.value = time.perf_counter()


def _png(images: np.ndarray, i: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    img = images[i % len(images)]
    Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(buf, format="PNG")
    return buf.getvalue()


def _batch_sizes(base: str, kind: str) -> tuple[float, float]:
    """(sum, count) of the batch-size histogram of ``kind`` (image | vector) in /metrics."""
    text = httpx.get(f"{base}/metrics").text
    values = {}
    for line in text.splitlines():
        for key in ("sum", "count"):
            if line.startswith(f"bctflow_serve_batch_size_{key}") and f'kind="{kind}"' in line:
                values[key] = float(line.split()[-1])
    return values.get("sum", 0.0), values.get("count", 0.0)


class _Cpu:
    """CPU seconds the service process and this one (the load generator) spent between two reads."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.start = self._read()

    def _read(self) -> tuple[float, float]:
        t = self.proc.cpu_times()
        return t.user + t.system, time.process_time()

    def per_query_ms(self, n: int) -> tuple[float, float]:
        """(service, load generator) CPU milliseconds per query over ``n`` queries since construction."""
        end = self._read()
        return tuple(1000 * (b - a) / max(n, 1) for a, b in zip(self.start, end))  # type: ignore[return-value]


def _inprocess_qps(index_dir: Path, q: np.ndarray, gen: int, batch: int, seconds: float = 3.0) -> float:
    """Queries/s of the index searched in this process, ``batch`` queries per call, k = 10, FAISS on
    ``_TORCH_THREADS`` OpenMP threads like the service (started with ``OMP_NUM_THREADS``)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(_TORCH_THREADS)
    index = GalleryIndex.load(index_dir)
    index.search(q[:batch], 10, query_generation=gen)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        start = n % (len(q) - batch + 1)
        index.search(q[start : start + batch], 10, query_generation=gen)
        n += batch
    qps = n / (time.perf_counter() - t0)
    faiss.omp_set_num_threads(threads)
    return qps


def _bracket(before: float, after: float, before_batch: int, batch: int) -> float:
    """A baseline's rate at ``batch``: the mean of its measurements before and after the load when the batch the
    warm-up formed (``before_batch``) is the load's, else the one after (at the load's batch)."""
    return (before + after) / 2 if before_batch == batch else after


def _bare_qps(ckpt: Path, images: np.ndarray, batch: int, seconds: float = 3.0) -> float:
    """Items/s of the model's bare batched forward (``_TORCH_THREADS`` threads, as the service runs it)."""
    import torch

    from components.models import load_model
    from components.models.export import RetrievalEmbedder

    model = RetrievalEmbedder(load_model(ckpt).eval())
    x = torch.from_numpy(np.ascontiguousarray(images[:batch]))
    n, t0, threads = 0, time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(_TORCH_THREADS)
    with torch.inference_mode():
        model(x)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            model(x)
            n += len(x)
    qps = n / (time.perf_counter() - t0)
    torch.set_num_threads(threads)
    return qps


def _start_service(home: Path, params_path: Path, port: int, log: Callable[[str], None]) -> subprocess.Popen:
    """``bctflow serve`` as a child process, its output in ``serve.log`` beside the workspace."""
    cmd = [sys.executable, "-m", "bctflow.cli", "serve", "--home", str(home), "--params", str(params_path)]
    env = {**os.environ, "OMP_NUM_THREADS": str(_TORCH_THREADS)}
    with open(home.parent / "serve.log", "w") as sink:
        proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=sink, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json().get("ready"):
                log(f"service ready on port {port}")
                return proc
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("bctflow serve never became ready")


def run_serve_bench(
    out: Path,
    work: Path,
    *,
    items: int,
    index_type: str,
    concurrency: int,
    image_concurrency: int,
    seconds: float,
    profile: str,
    command: str,
    image_size: int | None = None,
    reuse: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Measure the service; write ``out/serve.json`` and ``out/report.md``. Returns the report's path. ``reuse``: start
    from the workspace an earlier run with the same params prepared (:func:`benchmarks.serve_prepare.prepare`)."""
    out.mkdir(parents=True, exist_ok=True)
    work = work.resolve()  # the lineage records paths inside the workspace relative to it: give it an absolute home
    image_size = corpus_image_size(profile, image_size)
    corpus_dir = work.parent / f"corpus-{items}-{image_size}px"
    base = create_dataset("fashion_mnist", work.parent / "datasets", download=False).train.decode()
    build_scale_corpus(corpus_dir, items, base_images=base.images, base_labels=base.labels, image_size=image_size)
    raw = scale_params(profile, corpus_dir, index_type, 8192, 1, None, "faiss")
    raw["data"]["image_size"] = image_size  # the model trains on, and the service preprocesses to, the corpus's size
    res: dict[str, Any] = {
        "items": items,
        "index_type": index_type,
        "concurrency": concurrency,
        "image_concurrency": image_concurrency,
        "seconds": seconds,
        "image_size": image_size,
        "torch_threads": _TORCH_THREADS,
    }
    home, plan, new_index, metrics = prepare(work, raw, reuse, res, log)
    live = LivePointer(home / "live")
    old_index = live.serving_index()
    store = GalleryParts(GalleryVersion.of_index(live.pointer()["index"]).serving().gallery)
    vectors = next(store.parts()).gallery.vectors()[:2000]
    images = base.images[:256]
    if images.ndim == 3:
        images = images[:, :, :, None]
    import torch

    from components.data.sources.decode import resize_uint8  # the query images: the corpus's size

    images = resize_uint8(torch.from_numpy(images).permute(0, 3, 1, 2), image_size).permute(0, 2, 3, 1).numpy()
    pngs = [_png(images, i) for i in range(len(images))]
    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Event(), ctx.Event(), ctx.Value("d", float("nan"))
    switcher = ctx.Process(target=_switch_when_told, args=(plan, new_index, metrics, ready, go, done))
    switcher.start()
    port = _free_port()
    proc = _start_service(home, work / "params.yaml", port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        load_start = os.getloadavg()[0]  # other processes on the machine: the service and the load share it
        gen0 = httpx.get(f"{url}/generations").json()
        qgen = int(gen0["image_queries_embedded_by"])
        ready.wait(120)

        vec_requests = [Request.json("/search", {"vector": v.tolist(), "generation": 0, "k": 10}) for v in vectors]
        img_requests = [Request("/search?k=10", png, "image/png") for png in pngs]

        def vec(i: int) -> Request:
            return vec_requests[i % len(vec_requests)]

        def img(i: int) -> Request:
            return img_requests[i % len(img_requests)]

        run_load(url, vec, concurrency=concurrency, seconds=2.0)  # warm-up: also the batch size the baselines take
        s0, c0 = _batch_sizes(url, "vector")  # the warm-up's batches (measuring in-process changes none of them)
        warm = max(1, round(s0 / max(c0, 1)))
        before = _inprocess_qps(old_index, vectors, 0, warm), _inprocess_qps(old_index, vectors, 0, 1)
        cpu = _Cpu(proc.pid)
        v = run_load(url, vec, concurrency=concurrency, seconds=seconds)
        s1, c1 = _batch_sizes(url, "vector")
        res["mean_vector_batch"] = (s1 - s0) / max(c1 - c0, 1)
        ok = [s for s in v.samples if s.status == 200]
        res["vector_service_cpu_ms"], res["vector_client_cpu_ms"] = cpu.per_query_ms(len(v.samples))
        wall = max(s.end for s in v.samples) - v.t0
        res.update(vector_qps=len(ok) / wall, vector_p50_ms=percentile_ms(ok, 50), vector_p99_ms=percentile_ms(ok, 99))
        res["vector_failed"] = len(v.samples) - len(ok)
        batch = max(1, round(res["mean_vector_batch"]))
        # the baselines measured before and after the load (the mean of the two): on a noisy machine a single
        # measurement a few seconds away from the load drifted by up to 15% from one run to the next
        res["inprocess_search_qps"] = _bracket(before[0], _inprocess_qps(old_index, vectors, 0, batch), warm, batch)
        res["inprocess_search_qps_batch1"] = (before[1] + _inprocess_qps(old_index, vectors, 0, 1)) / 2
        res["vector_vs_inprocess"] = res["vector_qps"] / res["inprocess_search_qps"]
        res["vector_vs_inprocess_batch1"] = res["vector_qps"] / res["inprocess_search_qps_batch1"]

        ckpt = home / "generations" / f"gen_{qgen:03d}" / "model.pt"
        run_load(url, img, concurrency=image_concurrency, seconds=2.0)  # warm-up, and the batch size it forms
        s0, c0 = _batch_sizes(url, "image")  # the warm-up's batches (the bare forward changes none of them)
        warm = max(1, round(s0 / max(c0, 1)))
        bare_before = _bare_qps(ckpt, images, warm)
        cpu = _Cpu(proc.pid)
        m = run_load(url, img, concurrency=image_concurrency, seconds=seconds)
        res["image_service_cpu_ms"], res["image_client_cpu_ms"] = cpu.per_query_ms(len(m.samples))
        s1, c1 = _batch_sizes(url, "image")
        ok = [s for s in m.samples if s.status == 200]
        wall = max(s.end for s in m.samples) - m.t0
        res.update(image_qps=len(ok) / wall, image_p50_ms=percentile_ms(ok, 50), image_p99_ms=percentile_ms(ok, 99))
        res["mean_image_batch"] = (s1 - s0) / max(c1 - c0, 1)
        batch = max(1, round(res["mean_image_batch"]))
        res["bare_forward_qps"] = _bracket(bare_before, _bare_qps(ckpt, images, batch), warm, batch)
        res["image_vs_bare"] = res["image_qps"] / res["bare_forward_qps"]
        res["forward_cpu_ms_per_item"] = 1000 * _TORCH_THREADS / res["bare_forward_qps"]

        switched: dict[str, float] = {}
        half = seconds

        def swap(t0: float) -> None:
            time.sleep(max(0.0, t0 + half - time.perf_counter()))
            switched["at"] = time.perf_counter() - t0
            go.set()

        before = int(gen0["live_gallery"]["version"])
        w = run_load(url, img, concurrency=image_concurrency, seconds=2 * half + 6, during=swap)
        new = [s for s in w.samples if s.status == 200 and s.body["answered_by"]["version"] != before]
        first = min((s.end - w.t0 for s in new), default=float("nan"))
        at = switched["at"]
        steady = [s for s in w.window(0, at) if s.status == 200]
        swapping = [s for s in w.window(at, first + 1.0) if s.status == 200]
        res["swap_s"] = first - at
        res["switch_s"] = done.value - w.t0 - at  # the backfill's switch itself (lineage commit, CURRENT, aliases)
        res["steady_p99_ms"], res["swap_p99_ms"] = percentile_ms(steady, 99), percentile_ms(swapping, 99)
        res["steady_requests"], res["swap_window_requests"] = len(steady), len(swapping)
        res["failed_requests"] = sum(s.status != 200 for s in w.samples)
        res["mixed_responses"] = sum(
            any(g != s.body["answered_by"]["gallery_generation"] for g in s.body["generations"])
            for s in w.samples
            if s.status == 200
        )
        res["answered_by_new_version"] = len(new)
        res["swap_timeline"] = swap_timeline(w, at, first)
        res["swap_p99_vs_steady"] = res["swap_p99_ms"] / res["steady_p99_ms"]
        after = httpx.get(f"{url}/generations").json()
        res["after_swap"] = {k: after[k] for k in ("production_generation", "compatible_generations")}
        res["after_swap"]["version"] = after["live_gallery"]["version"]
        res["after_swap"]["last_reload_error"] = httpx.get(f"{url}/health").json()["last_reload_error"]
        refused = [
            httpx.post(f"{url}/search", json={"vector": vectors[i].tolist(), "generation": 0, "k": 10})
            for i in range(100)
        ]
        res["incompatible_queries"] = len(refused)
        res["refused_incompatible"] = sum(r.status_code == 409 for r in refused)
        res["refusal_example"] = refused[0].json().get("error")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        switcher.join(30)
    # the service's own account of its swaps ("serving version N … loaded in X s", "version M released")
    log_lines = (home.parent / "serve.log").read_text(errors="replace").splitlines()
    res["service_swap_log"] = [line.split("bctflow.serve ", 1)[1] for line in log_lines if "bctflow.serve INFO" in line]
    res["cpu_cores"] = os.cpu_count()
    res["load_average_1m_at_start"], res["load_average_1m_at_end"] = load_start, os.getloadavg()[0]
    return write_serve_report(res, out, command)


def write_serve_report(res: dict[str, Any], out: Path, command: str) -> Path:
    """``out/serve.json`` (``res`` and its provenance) and ``out/report.md`` (``command``: the run's); returns the
    md."""
    return write_run_report(out, "serve.json", res, lambda r: render_report(r, command))
