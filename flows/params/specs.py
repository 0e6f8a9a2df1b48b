"""Params as the components' configs: a :class:`ModelSpec` from params and the training data, a
:class:`TrainConfig`, the :class:`~components.indexing.backend.IndexOptions` every gallery's index is built with
(shared by the lifecycle and the benchmark), the gallery's :class:`~components.indexing.backend.VectorStore` and its
collection names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.data.sources.split import SourceDataset
from components.data.stats import normalization_stats
from components.geometry import create_space
from components.indexing.backend import IndexOptions, VectorStore, vector_store
from components.models import ModelSpec
from components.training.loop import TrainConfig
from flows.params import Params

__all__ = [
    "RADIAL_LABEL_SMOOTHING",
    "collection_name",
    "gallery_store",
    "index_options",
    "label_smoothing",
    "model_spec_from_params",
    "train_config_from_params",
]

#: ``train.label_smoothing: auto`` for a geometry whose radius encodes confidence (Lorentz): the smoothing of the
#: equal-budget tables' Lorentz head (tanh squash, MLR logit scale 4), which stops the classifier rewarding radius
#: once a point is classified; a Euclidean model's auto is 0 (docs/methods.md)
RADIAL_LABEL_SMOOTHING = 0.3


def model_spec_from_params(
    p: Params,
    train: SourceDataset,
    class_order: Sequence[int],
    class_names: Sequence[str],
    *,
    geometry: str,
    zeta: float | None,
    backbone: str | None = None,
    backbone_kwargs: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> ModelSpec:
    """params.model / params.geometry + the data's shape and statistics (``stats``: (mean, std) given instead of
    measured) + method overrides."""
    mean, std = stats if stats is not None else normalization_stats(train)
    h, _, c = train.image_shape
    fields: dict[str, Any] = dict(
        backbone=backbone or p.model.backbone,
        backbone_kwargs=dict(p.model.backbone_kwargs if backbone_kwargs is None else backbone_kwargs),
        small_stem=p.model.small_stem,
        in_chans=c,
        image_size=h,
        embed_dim=p.model.embed_dim,
        geometry=geometry,  # type: ignore[arg-type]
        curvature=p.geometry.curvature,
        learn_curvature=p.geometry.learn_curvature,
        radial=p.geometry.radial,
        learn_scale=p.geometry.learn_scale,
        zeta=zeta if create_space(geometry).radius_encodes_confidence else None,
        num_classes=len(class_order),
        class_order=tuple(int(c) for c in class_order),
        class_names=tuple(class_names),
        classifier_scale=p.model.classifier_scale,
        mlr_scale=p.model.mlr_scale,
        classifier=p.model.classifier,
        bn_neck=p.model.bn_neck,
        norm_mean=mean,
        norm_std=std,
        features=p.model.features,
    )
    fields.update(overrides or {})
    return ModelSpec(**fields)


def label_smoothing(p: Params, geometry: str) -> float:
    """``train.label_smoothing`` for a model of ``geometry``: the number given, or auto's
    (:data:`RADIAL_LABEL_SMOOTHING` where the radius encodes confidence, else 0)."""
    value = p.train.label_smoothing
    if value != "auto":
        return float(value)
    return RADIAL_LABEL_SMOOTHING if create_space(geometry).radius_encodes_confidence else 0.0


def train_config_from_params(
    p: Params,
    *,
    geometry: str | None = None,
    epochs: int | None = None,
    seed: int | None = None,
    align_weight: float | None = None,
) -> TrainConfig:
    """params.train / data.augment / alignment.weight as a :class:`TrainConfig` for a model of ``geometry``
    (default: ``model.geometry``)."""
    t, a = p.train, p.data.augment
    return TrainConfig(
        epochs=epochs or t.epochs,
        batch_size=t.batch_size,
        optimizer=t.optimizer,
        lr=t.lr,
        momentum=t.momentum,
        weight_decay=t.weight_decay,
        schedule=t.schedule,
        warmup_epochs=t.warmup_epochs,
        seed=t.seed if seed is None else seed,
        device=t.device,
        keep_checkpoints=t.keep_checkpoints,
        crop_padding=a.crop_padding,
        hflip=a.hflip,
        align_weight=p.alignment.weight if align_weight is None else align_weight,
        base_loss=t.base_loss,
        base_options=dict(t.base_options),
        label_smoothing=label_smoothing(p, geometry or p.model.geometry),
        precision=t.precision,
        compile=t.compile,
        compile_mode=t.compile_mode,
    )


def index_options(p: Params) -> IndexOptions:
    """The index every gallery of this run is built with (params ``index:``, in no store's terms: the FAISS files
    read its settings, every store its ``recall_queries``)."""
    settings = p.index.model_dump(exclude={"min_recall", "recall_queries"})
    return IndexOptions(settings, recall_queries=p.index.recall_queries)


def gallery_store(p: Params, home: Path) -> VectorStore:
    """The store params ``gallery:`` name; a relative file ``gallery.uri`` (a Milvus Lite file) lies in the
    workspace ``home``."""
    uri = p.gallery.uri
    if uri and "://" not in uri and not Path(uri).is_absolute():
        uri = str(Path(home) / uri)
    return vector_store(p.gallery.store, uri, p.gallery.index_options)


def collection_name(p: Params, generation: int, version: int, corpus: bool) -> str:
    """The store's name for one gallery of a version: ``<gallery.name>_g<N>_v<k>`` (the evaluation gallery), with
    ``_corpus`` for the serving corpus; version 0 is the generation's own folder, k ≥ 1 the backfill's
    ``live/index-v<k>``."""
    return f"{p.gallery.name}_g{generation}_v{version}" + ("_corpus" if corpus else "")
