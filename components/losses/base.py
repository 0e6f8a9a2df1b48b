"""The contract every alignment method implements.

A method is an ``nn.Module`` (so it may own trainable parts, e.g. a
discriminator) registered by name. The training loop calls
:meth:`AlignmentLoss.prepare` once with the frozen old model, then
:meth:`AlignmentLoss.forward` every step with the new and old outputs of the
same augmented batch, and adds ``weight * sum(terms)`` to the base loss
(HBCT Eq. (13): L = L_base + λ·(L_entail + L_contrast)). After training, the evaluation and the benchmark rows ask
:meth:`AlignmentLoss.diagnostics` for the method's own health numbers (e.g. HBCT's cones), so no generic code
computes a method's quantities.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from components.errors import ConfigError
from components.models.encoder import EmbeddingModel, ModelOutput
from components.models.spec import ModelSpec

__all__ = ["AlignmentContext", "AlignmentLoss", "EmbeddedGallery", "LossOutput", "MethodDiagnostics", "NoOptions"]


@dataclass
class AlignmentContext:
    """What a method may look at before training.

    label_map: (C_new,) int64, the old model's label index of each new label
    (-1 for classes the old model never saw). ``batches`` yields un-augmented
    (images (B, C, H, W) in [0, 1], new labels (B,)) over the training data;
    ``sample(n)`` the same over a seeded random sample of at most n training items;
    ``augment(x, generator)`` applies the training augmentation to such a batch;
    ``seed`` is the training run's seed.
    """

    new_spec: ModelSpec
    device: torch.device
    old_model: EmbeddingModel | None = None
    label_map: Tensor | None = None
    batches: Callable[[], Iterator[tuple[Tensor, Tensor]]] | None = None
    reference_model: EmbeddingModel | None = None
    sample: Callable[[int], Iterator[tuple[Tensor, Tensor]]] | None = None
    augment: Callable[[Tensor, torch.Generator], Tensor] | None = None
    seed: int = 0


@dataclass
class LossOutput:
    """terms: named scalar losses (summed and weighted by λ); stats: detached scalars to log — 0-d tensors stay on
    the device (the training loop sums them there and reads them once per epoch, docs/design.md §7.12)."""

    terms: dict[str, Tensor]
    stats: dict[str, Tensor | float] = field(default_factory=dict)


@dataclass(frozen=True)
class NoOptions:
    pass


class EmbeddedGallery(Protocol):
    """One model's embeddings of the gallery items, as a method's diagnostics read them (a
    :class:`~components.indexing.gallery.GalleryEmbeddings` is one): ``z`` (N, D) float, the tangent vectors of a
    Lorentz model (the raw embedding of a Euclidean one); ``curvature`` K; ``labels`` (N,) int64."""

    @property
    def z(self) -> np.ndarray: ...

    @property
    def curvature(self) -> float: ...

    @property
    def labels(self) -> np.ndarray: ...


@dataclass(frozen=True)
class MethodDiagnostics:
    """A method's own health numbers of a trained model against its parent (docs/design.md §4.5).

    measured: numbers measured on the gallery — the evaluation step records them as ``diag/<name>`` and the
    benchmark rows as columns; settings: the method's values they were measured with (HBCT: the ε of its cones),
    which the benchmark rows show beside them (a generation records them already among its hyperparameters: the
    configured options and the ``choices``)."""

    measured: dict[str, float | None] = field(default_factory=dict)
    settings: dict[str, float] = field(default_factory=dict)


class AlignmentLoss(nn.Module):
    """Base class. Subclasses set ``name``, ``requires_old``, ``space`` and ``Options``."""

    name: ClassVar[str] = ""
    #: needs the parent (old) model's outputs on every batch
    requires_old: ClassVar[bool] = True
    #: needs an independently trained new model (φ*) as a frozen target on every batch (BT²)
    requires_reference: ClassVar[bool] = False
    #: False for training-free methods (PSP / LSP): the model trains with the base loss only
    trains: ClassVar[bool] = True
    #: the name of the space (components/geometry/spaces/) the new and old models must have (None: any, but the same)
    space: ClassVar[str | None] = None
    #: frozen dataclass of hyperparameters (params.yaml ``alignment.options.<name>``)
    Options: ClassVar[type] = NoOptions

    def __init__(self, options: Any | None = None) -> None:
        super().__init__()
        self.options = options if options is not None else self.Options()
        #: hyperparameters the method chose from data in :meth:`prepare` (with the reasons), recorded beside the
        #: configured ones: the training result carries them into the lineage and the benchmark reports
        self.choices: dict[str, Any] = {}

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any] | None) -> Any:
        """``alignment.options.<name>`` into the method's ``Options`` (ConfigError naming the key): the values checked
        here, the keys by the catalog (:func:`components.losses.catalog.check_alignment_options`)."""
        try:
            return cls.Options(**dict(raw or {}))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"alignment {cls.name!r}: {err} (params.yaml alignment.options.{cls.name})") from None

    # The checks below run before anything trains; they are classmethods so a plan can make them
    # without building the loss.
    @classmethod
    def needs_reference(cls, options: Any) -> bool:
        """Whether training with these options needs the independent reference φ* (BT²)."""
        return cls.requires_reference

    @classmethod
    def check_models(
        cls, options: Any, new_geometry: str, new_dim: int, old_geometry: str | None = None, old_dim: int | None = None
    ) -> None:
        """Refuse model combinations the method cannot align."""
        if cls.space is not None and new_geometry != cls.space:
            raise ConfigError(
                f"alignment {cls.name!r} needs a {cls.space} model, got {new_geometry}; set model.geometry: "
                f"{cls.space}, or choose a method for {new_geometry} models (docs/methods.md)"
            )
        if cls.requires_old:
            if old_geometry is None:
                raise ConfigError(f"alignment {cls.name!r} needs a parent generation; train generation 0 first")
            if old_geometry != new_geometry or old_dim != new_dim:
                raise ConfigError(
                    f"alignment {cls.name!r} compares new and old embeddings directly, but the parent is "
                    f"{old_geometry}/d={old_dim} and the new model {new_geometry}/d={new_dim}; "
                    "use the parent's geometry and embed_dim"
                )

    @classmethod
    def model_overrides(cls, options: Any, parent: ModelSpec | None) -> dict[str, Any]:
        """ModelSpec fields the new model must have for this method (e.g. the BT² head, PSP features)."""
        return {}

    @classmethod
    def check_lineage(cls, options: Any, new_class_order: tuple[int, ...], parent: ModelSpec | None) -> None:
        """Refuse a class order or parent the method cannot work with."""

    @classmethod
    def diagnostics(
        cls, options: Any, choices: Mapping[str, Any], old: EmbeddedGallery, new: EmbeddedGallery
    ) -> MethodDiagnostics:
        """The method's own health numbers of a trained model, measured after training (without building the loss).

        ``old`` / ``new``: the parent's and the new model's embeddings of the same gallery items, row-aligned, the
        new ones able to query the old ones (same geometry; same width, or a compatible prefix); ``choices``: what
        :meth:`prepare` chose from data, as the training result records them. Default: none."""
        return MethodDiagnostics()

    def prepare(self, ctx: AlignmentContext) -> None:
        """One-off setup with the frozen old model (class statistics, frozen heads...)."""

    def forward(
        self, new: ModelOutput, old: ModelOutput | None, labels: Tensor, ref: ModelOutput | None = None
    ) -> LossOutput:
        """Loss terms for one batch: ``new``/``old``/``ref`` are the three models' outputs on the same view."""
        raise NotImplementedError
