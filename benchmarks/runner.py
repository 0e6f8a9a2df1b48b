"""Training and evaluating benchmark models, with a cache that makes interrupted runs resume.

Every trained model is keyed by everything that determines it (model spec, data
selection, method + options, λ, seed, training config, parent and target
models); its checkpoint, its embeddings of the validation split and of the
test gallery, and its wall time are stored under ``<out>/cache/<key>/``.
Epoch checkpoints live there too, so even a model interrupted mid-training
resumes from its last epoch. A model whose loss became non-finite leaves ``diverged.json`` there instead, and a
rerun raises the same :class:`~components.training.TrainingDivergedError` without training it again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.profile import Arch, Profile
from benchmarks.records import ModelRecord, RecordStore, evaluate, parents_digest
from components.data import DataManifest, select_training_data
from components.data.sources.split import SourceDataset
from components.data.split import stratified_split
from components.evaluation import gallery_metrics
from components.indexing.gallery import GalleryEmbeddings
from components.io import atomic_write_text
from components.losses import AlignmentChoice, AlignmentLoss
from components.models import ModelSpec, build_model, load_model, save_model
from components.models.checkpoint import LATE_FIELDS
from components.training import TrainConfig, TrainingDivergedError, TrainResult, embed_split, train_model
from components.training.data import training_data
from components.training.device import cuda_available
from flows.gallery import dataset_splits
from flows.params import Params, apply_overrides
from flows.planning import RoleRequest, resolve_role

__all__ = ["Bench", "BenchModel", "ModelRef", "ModelRequest", "training_summary"]


@dataclass
class BenchModel:
    """A trained (or cached) benchmark model and its embeddings of the validation split and the test gallery."""

    key: str
    label: str
    spec: ModelSpec
    checkpoint: Path
    seconds: float
    history: list[dict[str, float]]
    val: GalleryEmbeddings
    test: GalleryEmbeddings
    meta: dict[str, Any] = field(default_factory=dict)

    def view(self, features: str) -> BenchModel:
        """The same model with PSP / LSP (or embedding) retrieval features."""
        return replace(
            self, val=self.val.view(features), test=self.test.view(features), label=f"{self.label}[{features}]"
        )


@dataclass(frozen=True)
class ModelRef:
    """A model of the cache by what training needs of a parent: its key, spec and checkpoint (no embeddings)."""

    key: str
    label: str
    spec: ModelSpec
    checkpoint: Path


@dataclass(frozen=True)
class ModelRequest:
    """One benchmark model: its training data and everything else that determines it.

    ``generation`` / ``role``: what the model stands for in a lineage (the old model: generation 0; a new model: 1;
    φ*: generation 1's "reference"); with ``seed`` they give its own initialisation, the one the pipeline would give
    it (:mod:`flows.planning.roles`). ``method`` / ``options``: the alignment of its generation; ``old`` /
    ``reference``: its parent and φ* (a trained model or a :class:`ModelRef` to one in the cache, what a grid worker
    gets); ``params``: dotted params overrides for this model only (ablations: curvature, Δζ, base loss, …).
    """

    data: DataManifest
    geometry: str
    arch: Arch
    method: str = "independent"
    options: dict[str, Any] | None = None
    weight: float | None = None
    seed: int = 0
    generation: int = 1
    role: str = "model"
    zeta: float | None = None
    old: BenchModel | ModelRef | None = None
    reference: BenchModel | ModelRef | None = None
    epochs: int | None = None
    params: dict[str, Any] | None = None


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


#: TrainConfig fields that choose how a step runs and leave the trained model the same up to float rounding
_RUN_ONLY = ("compile", "compile_mode")


def _spec_key(spec: ModelSpec) -> dict[str, Any]:
    """The spec's part of a cache key: a field added after models were cached (the checkpoints' table,
    :data:`~components.models.checkpoint.LATE_FIELDS`) is left out at the value older models read as, so their keys
    still hold."""
    d = spec.to_dict()
    return {k: v for k, v in d.items() if not (k in LATE_FIELDS and v == LATE_FIELDS[k].value)}


def _cache_key(
    spec: ModelSpec,
    method: str,
    options: dict[str, Any] | None,
    cfg: TrainConfig,
    data: DataManifest,
    arch: Arch,
    align: AlignmentChoice,
    old: BenchModel | ModelRef | None,
    reference: BenchModel | ModelRef | None,
) -> str:
    """The cache key of a model: a digest of everything that determines it (parents only where the method uses them)."""
    return _digest(
        {
            "spec": _spec_key(spec),
            "method": method,
            "options": options or {},
            # how the step runs, not what it trains (like device "auto"): keys stay those of models cached before
            "cfg": {k: v for k, v in cfg.__dict__.items() if k not in _RUN_ONLY},
            "data": data.sha256,
            "old": old.key if old is not None and align.requires_old else None,
            "ref": reference.key if reference is not None and align.needs_reference else None,
            "pretrained": arch.pretrained_path,
        }
    )


def training_summary(meta: dict[str, Any], batch_size: int) -> dict[str, float]:
    """A trained model's ``done.json`` summed up: its last epoch's train accuracy (the running accuracy over that
    epoch's augmented batches, the criterion of ``bench.train_criterion``), epochs, SGD steps (full batches of
    ``batch_size`` an epoch, the training loop's ``drop_last``; models cached before ``batch_size`` was recorded
    trained with the params' one) and training images."""
    n, epochs, batch = int(meta["n_train"]), int(meta["epochs"]), int(meta.get("batch_size", batch_size))
    per_epoch = n // batch if n > batch else 1
    accuracy = float(meta["history"][-1]["train_accuracy"]) if meta.get("history") else float("nan")
    return {"train_accuracy": accuracy, "epochs": epochs, "steps": epochs * per_epoch, "n_train": n}


def _load_cached(folder: Path, key: str, label: str, spec: ModelSpec) -> BenchModel:
    """The finished model stored in the cache ``folder`` (its ``done.json``, checkpoint and embeddings)."""
    meta = json.loads((folder / "done.json").read_text())
    return BenchModel(
        key,
        label,
        spec,
        folder / "model.pt",
        meta["seconds"],
        meta["history"],
        GalleryEmbeddings.load(folder / "val.npz"),
        GalleryEmbeddings.load(folder / "test.npz"),
        meta,
    )


class Bench:
    """Data, caching and evaluation for one benchmark profile."""

    def __init__(
        self,
        profile: Profile,
        params: Params,
        out_dir: Path,
        datasets_dir: Path,
        log: Callable[[str], None] = print,
        records: RecordStore | None = None,
    ) -> None:
        """``out_dir``: the model cache's parent; ``records``: where new models' evaluation records are kept (and
        found instead of training them, :meth:`record`); None: every new model is trained (or loaded from the cache)
        and measured."""
        self.profile = profile
        self.records = records
        self.settings = profile.bench
        self.params = params
        self.out_dir = Path(out_dir)
        self.datasets_dir = Path(datasets_dir)
        self.cache = self.out_dir / "cache"
        self.log = log
        d = params.data
        splits = dataset_splits(params, datasets_dir)
        self.splits = splits
        # hyperparameters are selected on a validation split carved from the training data, never on the test split
        tr, va = stratified_split(splits.train.labels, self.settings.validation_fraction, d.split_seed + 101)
        self.train: SourceDataset = splits.train.subset(tr)
        self.val: SourceDataset = splits.train.subset(va)
        self.test: SourceDataset = splits.test
        self.num_classes = splits.train.num_classes

    # ----------------------------------------------------------------------------- data
    def selection(self, classes: Sequence[int] | str = "all", fraction: float = 1.0, seed: int = 0) -> DataManifest:
        order = list(range(self.num_classes)) if classes == "all" else [int(c) for c in classes]
        return select_training_data(
            self.train,
            dataset=self.splits.name,
            fingerprint=self.splits.fingerprint,
            class_order=order,
            fraction=fraction,
            seed=seed,
        )

    # ----------------------------------------------------------------------------- training
    def train_model(self, label: str, req: ModelRequest) -> BenchModel:
        """Train (or load from the cache) one model; embed the validation split and the test gallery."""
        align, spec, cfg, key = self._resolve(req)
        loss = align.build()  # before the seeded initialisation in _fit, as every cached result was made
        folder = self.cache / key
        if self.is_cached(key):
            return _load_cached(folder, key, label, spec)
        diverged = folder / "diverged.json"
        if diverged.exists():  # a model whose loss became non-finite: trained once, not again on a resume
            raise TrainingDivergedError(json.loads(diverged.read_text())["error"] + f" (recorded in {diverged})")
        self.log(
            f"  training {label} ({req.method}, {req.geometry}, λ={cfg.align_weight}, seed={req.seed}, "
            f"{len(req.data)} samples, {cfg.epochs} epochs)"
        )
        try:
            result = self._fit(spec, req, cfg, loss, folder, key, align=align)
        except TrainingDivergedError as err:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_text(diverged, json.dumps({"label": label, "error": str(err)}))
            raise
        val, test, embed_seconds = self._embed_and_save(result.model, folder)
        meta = {
            "label": label,
            "method": req.method,
            "options": req.options or {},
            "weight": cfg.align_weight,
            "seed": req.seed,
            "init_seed": cfg.seed,
            "geometry": req.geometry,
            "backbone": req.arch.backbone,
            "backbone_kwargs": req.arch.backbone_kwargs,
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "n_train": len(req.data),
            "seconds": result.seconds,
            "embed_seconds": embed_seconds,
            "device": result.device,
            "torch_threads": torch.get_num_threads(),  # CPU results depend on it in the last bits
            "history": result.history,
            "choices": result.choices,  # what the method chose from data (HBCT's ε by the view_angle rule)
        }
        atomic_write_text(folder / "done.json", json.dumps(meta, indent=1, default=float))
        for ck in (folder / "checkpoints").glob("*.pt"):
            ck.unlink()
        return BenchModel(key, label, spec, folder / "model.pt", result.seconds, result.history, val, test, meta)

    def model_ref(self, label: str, req: ModelRequest) -> ModelRef:
        """What :meth:`train_model` with this request trains, without training it: its cache key and spec."""
        _, spec, _, key = self._resolve(req)
        return ModelRef(key, label, spec, self.cache / key / "model.pt")

    def training_summary(self, model: BenchModel | ModelRef) -> dict[str, float]:
        """What a finished model's training reached (:func:`training_summary` of its ``done.json``)."""
        meta = json.loads((self.cache / model.key / "done.json").read_text())
        return training_summary(meta, self.params.train.batch_size)

    def is_cached(self, key: str) -> bool:
        """Whether the model with cache key ``key`` is finished (its ``done.json`` is written last, atomically)."""
        return (self.cache / key / "done.json").exists()

    def _resolve(self, req: ModelRequest) -> tuple[AlignmentChoice, ModelSpec, TrainConfig, str]:
        """The alignment, model spec, training config and cache key of a request, by the lifecycle's role rules
        (:func:`flows.planning.roles.resolve_role`). Features are a view applied at evaluation: every model is
        trained and cached with its embedding, so one model serves each of its views."""
        p = apply_overrides(self.params, dict(req.params)) if req.params else self.params
        role = resolve_role(
            RoleRequest(
                params=p,
                role=req.role,
                generation=req.generation,
                method=req.method,
                options=req.options,
                parent=req.old.spec if req.old is not None else None,
                train=self.train,
                class_order=req.data.class_order,
                class_names=req.data.class_names,
                geometry=req.geometry,
                zeta=req.zeta,
                backbone=req.arch.backbone,
                backbone_kwargs=req.arch.backbone_kwargs,
                overrides=req.arch.overrides(),
                seed=req.seed,
                epochs=req.epochs,
                align_weight=req.weight,
            )
        )
        spec = replace(role.spec, features="embedding")
        align = role.alignment
        key = _cache_key(spec, req.method, req.options, role.config, req.data, req.arch, align, req.old, req.reference)
        return align, spec, role.config, key

    def _fit(
        self,
        spec: ModelSpec,
        req: ModelRequest,
        cfg: TrainConfig,
        loss: AlignmentLoss,
        folder: Path,
        key: str,
        *,
        align: AlignmentChoice,
    ) -> TrainResult:
        """Seed, build and train a model on the request's data (resuming from the epoch checkpoints in ``folder``)."""
        torch.manual_seed(cfg.seed)
        model = build_model(spec, req.arch.pretrained_path)
        old, reference = req.old, req.reference
        return train_model(
            model,
            training_data(req.data.take(self.train), req.data.class_order, pin=cuda_available()),
            cfg,
            loss,
            folder / "checkpoints",
            old_model=load_model(old.checkpoint) if old is not None and align.trains and align.requires_old else None,
            reference_model=load_model(reference.checkpoint)
            if reference is not None and align.needs_reference
            else None,
            run_key=key,
        )

    def _embed_and_save(self, model: Any, folder: Path) -> tuple[GalleryEmbeddings, GalleryEmbeddings, float]:
        """Embed the validation split and the test gallery, save them and the model into ``folder``.

        Returns ``(val, test, seconds spent embedding)``.
        """
        k = float(model.curvature.detach())
        t0 = time.perf_counter()
        val = self.embed(model, self.val, k)
        test = self.embed(model, self.test, k)
        embed_seconds = time.perf_counter() - t0
        save_model(model.cpu(), folder / "model.pt")
        val.save(folder / "val.npz")
        test.save(folder / "test.npz")
        return val, test, embed_seconds

    def embed(self, model: Any, data: SourceDataset, curvature: float | None = None) -> GalleryEmbeddings:
        """``data`` embedded by ``model`` (its own curvature unless ``curvature``), eval mode, the params' batch."""
        curvature = float(model.curvature.detach()) if curvature is None else curvature
        t = self.params.train
        emb, labels, ids = embed_split(
            model, data, batch_size=t.eval_batch_size, device=t.device, precision=t.precision
        )
        return GalleryEmbeddings.from_embeddings(emb, model.spec, curvature, ids, labels)

    def load(self, model: BenchModel | ModelRef) -> BenchModel:
        """A model of the cache with its embeddings (a :class:`ModelRef`, what a grid worker is given, is loaded)."""
        if isinstance(model, BenchModel):
            return model
        return _load_cached(self.cache / model.key, model.key, model.label, model.spec)

    def record(self, label: str, req: ModelRequest) -> ModelRecord:
        """The evaluation record of the new model ``req`` asks for against its old model and φ* (both required): the
        kept record when there is one (the model is not trained), else the model trained (or loaded from the cache),
        measured by :func:`~benchmarks.records.evaluate` and kept. A model whose training diverged raises
        TrainingDivergedError, from its record too."""
        assert req.old is not None and req.reference is not None, "a record measures a model against both parents"
        old_key, ref_key = req.old.key, req.reference.key
        new = self.model_ref(label, req)
        key = new.key
        rec = self.records.get(key, old_key, ref_key) if self.records is not None else None
        if rec is None:
            old, ref = self.load(req.old), self.load(req.reference)
            try:
                rec = evaluate(self.metrics, label, self.train_model(label, req), old, ref, req.method, req.options)
            except TrainingDivergedError as err:
                rec = ModelRecord(key, label, old_key, ref_key, parents_digest(old, ref), diverged=str(err))
            if self.records is not None:
                self.records.put(rec)
        if not rec.roles and rec.diverged is None and all(self.is_cached(k) for k in (old_key, ref_key)):
            # a record made before roles were recorded gains them: its parents' from the cache, the new model's from
            # its own meta (the new model's done.json, kept in the record: the model itself need not be cached)
            roles = {"old": self.training_summary(req.old), "ref": self.training_summary(req.reference)}
            roles["new"] = training_summary(rec.meta, self.params.train.batch_size)
            rec = replace(rec, roles=roles)
            if self.records is not None:
                self.records.put(rec)
        if rec.diverged is not None:
            raise TrainingDivergedError(rec.diverged)
        return rec

    # ----------------------------------------------------------------------------- evaluation
    def metrics(self, query: BenchModel, gallery: BenchModel, split: str = "test") -> dict[str, float]:
        """M(φ_query, φ_gallery) on the test gallery (or the validation split), leave-one-out."""
        q, g = (query.test, gallery.test) if split == "test" else (query.val, gallery.val)
        return gallery_metrics(
            q, g, ks=tuple(self.params.evaluation.cmc_k), chunk_size=self.params.evaluation.chunk_size
        )
