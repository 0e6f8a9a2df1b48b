"""The role rules: what a model of a generation trains with, given its role — one place for the lifecycle and the
benchmark.

A generation trains up to two models: its ``model`` (with the generation's alignment method, against the parent)
and, for P_com / P_up or a method that learns from it (BT²), an independent ``reference`` φ* in the same retrieval
space. :func:`resolve_role` turns a :class:`RoleRequest` into the alignment the role trains with, its
:class:`~components.models.ModelSpec` and its :class:`~components.training.loop.TrainConfig`:

* the reference trains with ``independent`` and takes only the retrieval view (``features``) of what the method
  asks of the model; the model takes every override the method asks of it (:meth:`AlignmentChoice.model_overrides`);
* each role starts from its own initialisation seed (:func:`components.training.seeds.init_seed`);
* the method checks the class order against its parent (:meth:`AlignmentChoice.check_lineage`).

The lifecycle's plan (:mod:`flows.planning.make`) resolves both roles once; ``benchmarks/runner.py`` resolves every
model of a benchmark table through the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from components.data.sources.split import SourceDataset
from components.losses import AlignmentChoice, choose_alignment
from components.models import ModelSpec
from components.training.loop import TrainConfig
from components.training.seeds import init_seed
from flows.params import Params
from flows.params.specs import model_spec_from_params, train_config_from_params

__all__ = ["ROLES", "ResolvedRole", "RoleRequest", "resolve_role"]

#: the models a generation trains (the flow trains the reference first: BT² learns from it)
ROLES = ("model", "reference")


@dataclass(frozen=True)
class RoleRequest:
    """One model of a generation: its lineage position, the method of its generation, and what it is trained on.

    ``method`` / ``options``: the generation's alignment (the reference trains independently whatever it is);
    ``parent``: the spec of the model it aligns to (None for generation 0); ``train``: the training split its
    normalisation statistics come from (``stats`` given instead: (mean, std) per channel); ``class_order`` /
    ``class_names``: its classes in model-label order; ``overrides``: spec fields fixed by the caller (an
    architecture's own fields); ``seed`` / ``epochs`` / ``align_weight``: None for params' (``train.seed``,
    ``train.epochs``, ``alignment.weight``); the role's initialisation seed derives from ``seed``.
    """

    params: Params
    role: str
    generation: int
    method: str
    options: dict[str, Any] | None
    parent: ModelSpec | None
    train: SourceDataset
    class_order: Sequence[int]
    class_names: Sequence[str]
    geometry: str
    zeta: float | None
    backbone: str | None = None
    backbone_kwargs: dict[str, Any] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    epochs: int | None = None
    align_weight: float | None = None
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None


@dataclass(frozen=True)
class ResolvedRole:
    """What a role trains with: the alignment (``independent`` for the reference), the model spec, the config."""

    alignment: AlignmentChoice
    spec: ModelSpec
    config: TrainConfig


def resolve_role(req: RoleRequest) -> ResolvedRole:
    """The role's alignment, spec and training config (ConfigError / CheckpointMismatchError when the method
    cannot train this model against its parent)."""
    if req.role not in ROLES:
        raise ValueError(f"unknown role {req.role!r}; use one of {ROLES}")
    generation_method = choose_alignment(req.method, req.options)
    asked = generation_method.model_overrides(req.parent)
    if req.role == "reference":  # an independent model in the same retrieval space
        method, asked = choose_alignment("independent"), {k: v for k, v in asked.items() if k == "features"}
    else:
        method = generation_method
    spec = model_spec_from_params(
        req.params,
        req.train,
        req.class_order,
        req.class_names,
        geometry=req.geometry,
        zeta=req.zeta,
        backbone=req.backbone,
        backbone_kwargs=req.backbone_kwargs,
        overrides={**req.overrides, **asked},
        stats=req.stats,
    )
    method.check_lineage(spec.class_order, req.parent)
    seed = init_seed(req.params.train.seed if req.seed is None else req.seed, req.generation, req.role)
    config = train_config_from_params(
        req.params, geometry=req.geometry, epochs=req.epochs, seed=seed, align_weight=req.align_weight
    )
    return ResolvedRole(method, spec, config)
