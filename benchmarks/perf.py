"""``bctflow bench perf``: the system's speed against bare baselines, each pair measured side by side in one run.

Every ratio compares two things on the same device, the same model and the same batches, timed alternately (best
of ``repeats``) so that load on a noisy machine hits both alike (docs/design.md §7.12):

* ``train_vs_bare``: the project's training loop (:func:`~components.training.train_model`, independent method, no
  augmentation, one checkpoint per epoch, ``train.compile`` as params say) in images/s ÷ a bare eager loop (forward,
  cross-entropy, backward, SGD step) with the same precision over the same images. ≥ 1 would mean the project loop is
  as fast as the bare one. Where the project loop compiles, its eager images/s are measured too
  (``compiled_vs_eager``).
* ``aligned_vs_independent``: HBCT's training time (old model's forward + the alignment terms) ÷ the independent one.

Training speed is the steady state: with 2 or more epochs the first is a warm-up (compilation, cuDNN's algorithm
search, the allocator) and only the later epochs are timed, on both sides; with 1 epoch the whole run is.
* ``embed_vs_bare``: :func:`~components.training.embed_images` images/s ÷ a bare ``model(x)`` loop under no_grad.
* ``eval_10k_vs_matmul``: exact leave-one-out CMC/mAP over 10k × 10k (Lorentz) ÷ one float32 matmul of the scores.
* ``knn_lorentz_vs_cosine``: exact FAISS kNN (k = 10) over Lorentz points ÷ over unit vectors, same n and d.
* ``flow_wall_vs_compute`` (``--flow``): the demo's wall time ÷ the compute it ran (training + embedding seconds
  that the generations record).

The model is the cpu profile's (params.yaml's model with a narrow ResNet-18, 16×16 grey images, Lorentz head);
images are random (speed, not quality). Writes ``OUT/perf.json`` and ``OUT/report.md``.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.eval_speed import measure_exact_eval
from benchmarks.perf_report import perf_report
from benchmarks.report import write_run_report
from components.data.base import ArrayDataset
from components.data.batches import ImageTensor, to_image_tensor
from components.geometry import Euclidean, Lorentz
from components.indexing.stores.faiss import GalleryIndex
from components.losses import create_alignment
from components.models import EmbeddingModel, ModelSpec, build_model
from components.training import TrainConfig, embed_images, train_model
from components.training.compile import Compile, CompileMode, use_compile
from components.training.device import autocast, prepare_module, select_device, to_memory_format, use_bf16
from flows.params import Params, model_spec_from_params, train_config_from_params

__all__ = ["run_perf"]

Log = Callable[[str], None]


#: the cpu profile's backbone width (benchmarks/profiles/cpu.yaml old_arch): a narrow ResNet-18
CPU_PROFILE_CHANNELS = [16, 32, 64, 128]


def _data(n: int, size: int = 16, classes: int = 10) -> ArrayDataset:
    """``n`` random grey ``size``×``size`` images with random labels (speed, not quality)."""
    rng = np.random.default_rng(0)
    return ArrayDataset(
        rng.integers(0, 256, (n, size, size, 1), dtype=np.uint8),
        rng.integers(0, classes, n),
        np.arange(n, dtype=np.int64),
        tuple(str(c) for c in range(classes)),
    )


def _spec(data: ArrayDataset) -> ModelSpec:
    """params.yaml's defaults with the cpu profile's backbone, a Lorentz head at ζ = 1."""
    return model_spec_from_params(
        Params(),
        data,
        range(data.num_classes),
        data.class_names,
        geometry=Lorentz.name,
        zeta=1.0,
        backbone_kwargs={"channels": CPU_PROFILE_CHANNELS},
        stats=((0.5,), (0.25,)),
    )


def _model(seed: int, spec: ModelSpec) -> EmbeddingModel:
    torch.manual_seed(seed)
    return build_model(spec)


def _tensor(data: ArrayDataset) -> ImageTensor:
    return to_image_tensor(data.images, data.labels)


def _cfg(batch: int, epochs: int, device: str, compile: Compile, compile_mode: CompileMode) -> TrainConfig:
    """params.yaml's training settings, with no augmentation (the bare loop has none), a constant lr of 0.01 and one
    checkpoint kept."""
    base = train_config_from_params(Params(), epochs=epochs)
    return replace(
        base,
        batch_size=batch,
        device=device,
        lr=0.01,
        schedule="constant",
        keep_checkpoints=1,
        crop_padding=0,
        hflip=False,
        compile=compile,
        compile_mode=compile_mode,
    )


def _timed(marks: list[float]) -> float:
    """Seconds of the timed epochs from the clock read at the start and at the end of every epoch: all but the
    first (the warm-up) when there are two or more."""
    return marks[-1] - marks[1 if len(marks) > 2 else 0]


def _timed_images(epochs: int, steps: int, batch: int) -> int:
    return (epochs - 1 if epochs > 1 else 1) * steps * batch


def _bare_train(model: EmbeddingModel, data: ImageTensor, cfg: TrainConfig) -> float:
    """Seconds for ``cfg.epochs`` epochs of the plainest loop: gather, forward (autocast), CE, backward, step."""
    dev = select_device(cfg.device)  # type: ignore[arg-type]
    model = prepare_module(model, dev, cfg.precision).train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    images, labels = data.images.to(dev), data.labels.to(dev)
    steps = len(data) // cfg.batch_size
    marks = [time.perf_counter()]
    for epoch in range(cfg.epochs):
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(epoch)).to(dev)
        for s in range(steps):
            idx = order[s * cfg.batch_size : (s + 1) * cfg.batch_size]
            x = to_memory_format(images.index_select(0, idx).float().div_(255.0), dev, cfg.precision)
            with autocast(dev, cfg.precision):
                out = model(x)
            loss = F.cross_entropy(out.logits.float(), labels.index_select(0, idx))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
    return _timed(marks)


def _project_train(spec: ModelSpec, data: ImageTensor, cfg: TrainConfig, method: str) -> float:
    """Seconds of the timed epochs of :func:`train_model` (its end-of-epoch callback comes after the epoch's
    metrics were read from the device, so the device has finished the epoch)."""
    old = _model(1, spec).eval() if method != "independent" else None
    torch.compiler.reset()  # each run compiles as a new process would (in its warm-up epoch), none reuses another's
    with tempfile.TemporaryDirectory() as d:
        marks = [time.perf_counter()]
        train_model(
            _model(0, spec),
            data,
            cfg,
            create_alignment(method),
            Path(d),
            old_model=old,
            on_epoch=lambda _e, _r: marks.append(time.perf_counter()),
        )
    return _timed(marks)


def measure_training(
    device: str,
    batch: int,
    n: int,
    epochs: int,
    repeats: int,
    log: Log,
    compile: Compile = "auto",
    compile_mode: CompileMode = "reduce-overhead",
) -> dict[str, Any]:
    """train_vs_bare and aligned_vs_independent (images/s of each, best of ``repeats``, taking turns); where the
    project loop compiles, also its eager speed (compiled_vs_eager)."""
    cfg = _cfg(batch, epochs, device, compile, compile_mode)
    compiles = use_compile(select_device(device), compile)  # type: ignore[arg-type]
    arrays = _data(n)
    spec, data = _spec(arrays), _tensor(arrays)
    best = {"project": float("inf"), "bare": float("inf"), "hbct": float("inf")}
    if compiles:
        best["project_eager"] = float("inf")
    for r in range(repeats):
        best["bare"] = min(best["bare"], _bare_train(_model(0, spec), data, cfg))
        best["project"] = min(best["project"], _project_train(spec, data, cfg, "independent"))
        best["hbct"] = min(best["hbct"], _project_train(spec, data, cfg, "hbct"))
        if compiles:
            eager = replace(cfg, compile="off")
            best["project_eager"] = min(best["project_eager"], _project_train(spec, data, eager, "independent"))
        log(f"  training round {r + 1}/{repeats}: " + ", ".join(f"{k} {v:.2f}s" for k, v in best.items()))
    images = _timed_images(epochs, n // batch, batch)
    ips = {k: images / v for k, v in best.items()}
    record = {
        "batch": batch,
        "images": images,
        "compile": f"{compile_mode}" if compiles else "off",
        "project_img_s": round(ips["project"], 1),
        "bare_img_s": round(ips["bare"], 1),
        "hbct_img_s": round(ips["hbct"], 1),
        "train_vs_bare": round(ips["project"] / ips["bare"], 3),
        "aligned_vs_independent": round(best["hbct"] / best["project"], 3),
    }
    if compiles:
        record["project_eager_img_s"] = round(ips["project_eager"], 1)
        record["compiled_vs_eager"] = round(ips["project"] / ips["project_eager"], 3)
    return record


def measure_embedding(device: str, batch: int, n: int, repeats: int) -> dict[str, Any]:
    """embed_vs_bare: :func:`embed_images` (uint8 host images → embeddings on the host) ÷ a bare no_grad loop."""
    arrays = _data(n)
    spec = _spec(arrays)
    model = _model(0, spec).eval()
    images_nhwc = arrays.images
    dev = select_device(device)  # type: ignore[arg-type]
    precision = "auto"
    bare_model = prepare_module(_model(0, spec), dev, precision).eval()
    x_all = torch.from_numpy(images_nhwc).permute(0, 3, 1, 2)

    @torch.no_grad()
    def bare() -> None:
        for s in range(0, n, batch):
            x = x_all[s : s + batch].to(dev).float().div_(255.0)
            with autocast(dev, precision):
                out = bare_model(to_memory_format(x, dev, precision), with_logits=True)
            out.emb.float().cpu()

    best_p = best_b = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        bare()
        best_b = min(best_b, time.perf_counter() - t)
        t = time.perf_counter()
        embed_images(model, images_nhwc, batch_size=batch, device=device)
        best_p = min(best_p, time.perf_counter() - t)
    return {
        "images": n,
        "project_img_s": round(n / best_p, 1),
        "bare_img_s": round(n / best_b, 1),
        "embed_vs_bare": round(best_b / best_p, 3),
    }


def measure_knn(n: int, d: int, k: int, repeats: int) -> dict[str, Any]:
    """knn_lorentz_vs_cosine: exact FAISS search of ``n`` queries over ``n`` items, Lorentz ÷ cosine (seconds)."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(n, d)) * (1.5 / np.sqrt(d))
    q = z + 0.1 * rng.normal(size=(n, d)) / np.sqrt(d)
    ids = np.arange(n, dtype=np.int64)
    lorentz, cosine = Lorentz(1.0), Euclidean(1.0)
    lor = GalleryIndex.build(lorentz.from_tangent(z), ids, space=lorentz, generation=0)
    cos = GalleryIndex.build(cosine.from_tangent(z), ids, space=cosine, generation=0)
    q_lor, q_cos = lorentz.from_tangent(q), cosine.from_tangent(q)
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for j, (index, queries) in enumerate(((lor, q_lor), (cos, q_cos))):
            t = time.perf_counter()
            index.search(queries, k)
            best[j] = min(best[j], time.perf_counter() - t)
    ratio = round(best[0] / best[1], 3)
    return {
        "n": n,
        "d": d,
        "k": k,
        "lorentz_s": round(best[0], 4),
        "cosine_s": round(best[1], 4),
        "knn_lorentz_vs_cosine": ratio,
    }


def flow_compute(home: Path, wall_s: float) -> dict[str, Any]:
    """flow_wall_vs_compute for flow runs that took ``wall_s`` in workspace ``home``: wall ÷ the training seconds
    the generations recorded (model + reference, ``generations/*/metrics.json``); embedding, indexing, evaluation,
    registration and the Prefect server all count as overhead."""
    metrics = [json.loads(m.read_text()) for m in sorted(home.glob("generations/gen_*/metrics.json"))]
    compute = sum(
        float(m.get("train_seconds") or 0.0) + float(m.get("reference_train_seconds") or 0.0) for m in metrics
    )
    return {
        "generations": len(metrics),
        "wall_s": round(wall_s, 2),
        "compute_s": round(compute, 2),
        "flow_wall_vs_compute": round(wall_s / compute, 3) if compute > 0 else None,
    }


def _device_words(device: str) -> str:
    dev = select_device(device)  # type: ignore[arg-type]
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return (
        f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    )


def run_perf(
    out: Path,
    *,
    device: str = "auto",
    batch: int = 128,
    train_images: int = 4096,
    epochs: int = 3,
    embed_images_n: int = 8192,
    repeats: int = 3,
    compile: Compile = "auto",
    compile_mode: CompileMode = "reduce-overhead",
    flow: Callable[[], dict[str, Any]] | None = None,
    command: str = "bctflow bench perf",
    log: Log = print,
) -> Path:
    """Measure every ratio, write ``out/perf.json`` and ``out/report.md``; returns the report's path. ``flow``: runs
    the demo's flows and returns :func:`flow_compute`'s record (the CLI supplies it; None leaves the ratio out)."""
    t0 = time.perf_counter()
    dev = select_device(device)  # type: ignore[arg-type]
    perf: dict[str, Any] = {
        "command": command,
        "device": _device_words(device),
        "precision": "bf16" if use_bf16(dev) else "fp32",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    log("training: project loop vs bare loop, independent vs hbct")
    perf["training"] = measure_training(device, batch, train_images, epochs, repeats, log, compile, compile_mode)
    log("embedding: embed_images vs bare")
    perf["embedding"] = measure_embedding(device, 512, embed_images_n, repeats)
    log("evaluation: exact 10k x 10k vs matmul")
    ev = measure_exact_eval(n=10000, d=128, repeats=repeats, space=Lorentz(1.0))
    perf["evaluation"] = {
        "n": ev["n"],
        "d": ev["d"],
        "eval_s": round(ev["eval_s"], 3),
        "matmul_s": round(ev["matmul_s"], 4),
        "eval_10k_vs_matmul": round(ev["ratio"], 2),
    }
    log("kNN: exact FAISS, Lorentz vs cosine")
    perf["knn"] = measure_knn(10000, 128, 10, repeats)
    if flow is not None:
        log("flow: the demo's two generations")
        perf["flow"] = flow()
    perf["seconds"] = time.perf_counter() - t0
    return write_run_report(out, "perf.json", perf, perf_report)
