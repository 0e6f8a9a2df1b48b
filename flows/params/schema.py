"""params.yaml: the single source of truth, parsed and validated up front.

Every value a run uses comes from here (CLI flags only override entries).
Validation happens before any data is touched or any model trains, and a bad
value gives one :class:`~components.errors.ConfigError` naming the key, the
value and the fix.

Each field is declared with what it shapes (``Model[int]``, ``RunOption[str]``, …:
flows/params/tags.py); the params digest and each DVC stage's keys are derived
from those tags, and no other list of keys exists.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from components.errors import ConfigError
from flows.params.gallery import GalleryParams, IndexParams
from flows.params.lifecycle import LifecycleParams
from flows.params.overrides import flatten_overrides, format_validation_error, parse_overrides, set_dotted
from flows.params.serve import ServeParams
from flows.params.tags import AlignedModel, AlignedOutput, Data, Model, Output, RunOption, pick, sections, select
from flows.params.upgrade import UpgradeParams

__all__ = [
    "DEFAULT_PARAMS_PATH",
    "PACKAGED_PARAMS_PATH",
    "BackfillParams",
    "BackfillRules",
    "GenerationSpec",
    "GeometryParams",
    "Params",
    "ScheduleParams",
    "apply_overrides",
    "flatten_overrides",
    "load_params",
    "params_digest",
    "params_from_dict",
]

DEFAULT_PARAMS_PATH = Path("params.yaml")
#: the repository's params.yaml as the installed package ships it (a test keeps the copy equal to the source)
PACKAGED_PARAMS_PATH = Path(__file__).with_name("default_params.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AugmentParams(_Strict):
    crop_padding: Model[int] = Field(1, ge=0, description="random-crop padding in pixels (0 = off)")
    hflip: Model[bool] = False


class DataParams(_Strict):
    dataset: Data[str] = "digits"
    root: RunOption[str | None] = None  # dataset cache; default <home>/datasets
    path: Data[str | None] = None  # image_folder: the class-per-directory tree; webdataset / manifest: train + test
    #: DataLoader worker processes decoding a training split streamed from disk (webdataset / manifest); it shapes
    #: the model: a streamed split's batches interleave the workers' shards
    workers: Model[int] = Field(2, ge=0)
    download: RunOption[bool] = True
    test_fraction: Data[float] = Field(0.3, gt=0.0, lt=1.0)
    split_seed: Data[int] = 0
    image_size: Data[int | None] = Field(None, gt=0)  # resize to this (None = native size)
    #: deterministic per-class subsampling (cpu benchmark profiles); part of the dataset fingerprint
    max_train_per_class: Data[int | None] = Field(None, gt=0)
    max_test_per_class: Data[int | None] = Field(None, gt=0)
    augment: AugmentParams = AugmentParams()


class ModelParams(_Strict):
    backbone: Model[str] = "resnet18"
    backbone_kwargs: Model[dict[str, Any]] = Field(default_factory=dict)
    small_stem: Model[bool] = True
    pretrained_path: Model[str | None] = None
    embed_dim: Model[int] = Field(128, gt=0)
    geometry: Model[Literal["lorentz", "euclidean"]] = "lorentz"
    #: Euclidean models: the classifier's logit scale (1.0 for the linear classifier; a cosine one wants e.g. 16)
    classifier_scale: Model[float] = Field(1.0, gt=0.0)
    #: Lorentz models: scale on the Lorentz MLR's logits (1.0 = HBCT Eq. (9); design §3.4); the default 4 is the
    #: head the equal-budget tables' best Lorentz row trains (docs/methods.md)
    mlr_scale: Model[float] = Field(4.0, gt=0.0)
    #: Euclidean models: linear (with bias) or cosine (unit rows, no bias), and BatchNorm on the embedding before L2
    #: normalisation; the defaults are the head the equal-budget tables chose on validation (docs/methods.md)
    classifier: Model[Literal["cosine", "linear"]] = "linear"
    bn_neck: Model[bool] = False
    #: retrieval features: the embedding, or PSP / LSP simplex projections of the classifier logits
    features: Model[Literal["embedding", "psp", "lsp"]] = "embedding"


class GeometryParams(_Strict):
    curvature: Model[float] = 1.0  # K (curvature is -K)
    learn_curvature: Model[bool] = False
    zeta0: Model[float] = 1.0
    delta_zeta: AlignedModel[float] = 0.2
    #: how the tangent radius is bounded at ζ: the hard clip (the HBCT paper's), or the smooth tanh squash (the
    #: default: the head of the equal-budget tables' best Lorentz row; docs/design.md §3)
    radial: Model[Literal["clip", "tanh"]] = "tanh"
    #: a learned scale α ≤ 1 (initialised 1/√d) before the bound, in place of the fixed 1/√d
    learn_scale: Model[bool] = False
    #: ζ of an aligned generation: "fixed" (ζ_prev + Δζ) or "percentile": at least the parent's pre-bound radius
    #: at ``zeta_percentile`` over this generation's training images, + Δζ (docs/design.md §3.3)
    zeta_rule: AlignedModel[Literal["fixed", "percentile"]] = "fixed"
    zeta_percentile: AlignedModel[float] = Field(95.0, gt=0.0, le=100.0)

    #: field → (smallest allowed value, whether it is allowed itself, what the field means, a good value)
    _BOUNDS: ClassVar[dict[str, tuple[float, bool, str, str]]] = {
        "curvature": (0.0, False, "the Lorentz model has curvature -K", "1.0"),
        "zeta0": (0.0, False, "it is the clip radius of generation 0", "1.0"),
        "delta_zeta": (0.0, True, "each generation may only widen the clip radius", "0.2"),
    }

    @field_validator("curvature", "zeta0", "delta_zeta")
    @classmethod
    def _bounded(cls, v: float, info: ValidationInfo) -> float:
        low, inclusive, meaning, example = cls._BOUNDS[info.field_name]
        if v < low or (v == low and not inclusive):
            name = "curvature K" if info.field_name == "curvature" else info.field_name
            raise ValueError(
                f"{name} must be {'>=' if inclusive else '>'} {low:g} (got {v}); {meaning}, use e.g. {example}"
            )
        return v


class TrainParams(_Strict):
    epochs: Model[int] = Field(30, gt=0)
    batch_size: Model[int] = Field(64, gt=1)
    optimizer: Model[Literal["sgd", "adamw"]] = "sgd"
    lr: Model[float] = Field(0.1, gt=0.0)
    momentum: Model[float] = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: Model[float] = Field(5e-4, ge=0.0)
    schedule: Model[Literal["cosine", "constant"]] = "cosine"
    warmup_epochs: Model[int] = Field(0, ge=0)
    seed: Model[int] = 0
    device: RunOption[Literal["auto", "cpu", "cuda"]] = "auto"
    #: bf16 autocast + channels_last for the backbone (losses and hyperbolic operations stay float32)
    precision: Model[Literal["auto", "fp32", "bf16"]] = "auto"
    #: torch.compile the training step's forward passes (auto: on CUDA), in compile_mode (docs/design.md §7.12)
    compile: RunOption[Literal["auto", "off", "on"]] = "auto"
    compile_mode: RunOption[Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs"]] = "reduce-overhead"
    keep_checkpoints: RunOption[int] = Field(2, ge=1)
    eval_batch_size: RunOption[int] = Field(512, gt=0)
    base_loss: Model[Literal["ce", "mixed", "ce+mixed"]] = "ce"
    base_options: Model[dict[str, float]] = Field(default_factory=dict)
    #: cross-entropy label smoothing ε (0: none); takes the reward for radius out of the Lorentz classifier. "auto":
    #: 0.3 for a Lorentz model, 0 for a Euclidean one (each geometry's head in the equal-budget tables)
    label_smoothing: Model[float | Literal["auto"]] = "auto"
    #: data-parallel processes (torchrun's launcher, DDP; gloo on CPU, NCCL on GPUs); batch_size stays the global batch
    nproc: RunOption[int] = Field(1, ge=1)
    #: nodes of a multi-node training (the others run `bctflow train-node`), their c10d rendezvous host:port on this
    #: node, and the job folder every node reads ("": <home>/jobs)
    nnodes: RunOption[int] = Field(1, ge=1)
    rdzv_endpoint: RunOption[str] = ""
    job_dir: RunOption[str] = ""
    #: a folder of trained models shared between workspaces, by the digest of what shapes one (its data, its parent's
    #: checkpoint, its spec, config and alignment): a role found there is copied, not trained (null: none)
    cache_dir: RunOption[str | None] = None

    @field_validator("compile", mode="before")
    @classmethod
    def _yaml_switch(cls, v: Any) -> Any:
        """YAML reads ``off`` / ``on`` as booleans: take them as the words they were written as."""
        return {False: "off", True: "on"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("label_smoothing")
    @classmethod
    def _smoothing_range(cls, v: float | str) -> float | str:
        if isinstance(v, float) and not 0.0 <= v < 1.0:
            raise ValueError(f"must be in [0, 1) or auto (got {v}); use e.g. 0.1, 0 for none, or auto")
        return v

    @model_validator(mode="after")
    def _rendezvous_given(self) -> TrainParams:
        if self.nnodes > 1 and ":" not in self.rdzv_endpoint:
            raise ValueError(
                f"train.nnodes {self.nnodes} needs train.rdzv_endpoint, host:port on this node that the other nodes "
                "reach (e.g. --rdzv-endpoint node0.example:29400)"
            )
        return self


class AlignmentParams(_Strict):
    #: the method and λ the equal-budget tables chose in both geometries (docs/methods.md); the HBCT paper's: hbct, 0.3
    method: AlignedModel[str] = "bct"
    weight: AlignedModel[float] = Field(3.0, ge=0.0, description="lambda: weight of the alignment terms (HBCT Eq. 13)")
    # per-method hyperparameters, validated by the method's own Params class
    options: AlignedModel[dict[str, dict[str, Any]]] = Field(default_factory=dict)


class GenerationSpec(_Strict):
    """One entry of the chain that `dvc repro` / `bctflow chain` reproduces."""

    name: str | None = None  # default g<id>; required for the entries of `generations:`
    classes: list[int] | Literal["all"] = "all"
    fraction: float = Field(1.0, gt=0.0, le=1.0)
    alignment: str | None = None  # default: alignment.method (generation 0 always trains base-only)
    backbone: str | None = None
    backbone_kwargs: dict[str, Any] | None = None
    epochs: int | None = Field(None, gt=0)
    reference: bool | None = None  # train an independent reference (P_com / P_up)


class EvaluationParams(_Strict):
    cmc_k: Output[list[int]] = Field(default_factory=lambda: [1, 5])
    reference: AlignedOutput[bool] = True
    chunk_size: Output[int] = Field(1024, gt=0)
    #: exact CMC / mAP@all up to this many gallery items; above, top-k metrics from the FAISS index
    exact_max_items: Output[int] = Field(50_000, gt=0)

    @field_validator("cmc_k")
    @classmethod
    def _ks(cls, v: list[int]) -> list[int]:
        if not v or any(k <= 0 for k in v):
            raise ValueError(f"cmc_k must be a non-empty list of positive ranks (got {v}); use e.g. [1, 5]")
        if 1 not in v or 5 not in v:
            raise ValueError(f"cmc_k must contain 1 and 5 (got {v}); lineage reports cmc@1 and cmc@5")
        return sorted(set(v))


class BackfillRules(_Strict):
    """The backfill decision's rules (docs/design.md §7.4): each field but ``metric`` (what the rules compare on) is
    one rule's setting, read by the rule flows/backfill/rules.py registers under its name; null disables a rule."""

    metric: AlignedOutput[Literal["map", "cmc@1", "cmc@5"]] = "map"
    require_compatibility: AlignedOutput[bool] = True
    p_com_floor: AlignedOutput[float | None] = None
    zeta_ceiling: AlignedOutput[float | None] = 3.0
    max_generations_since_backfill: AlignedOutput[int | None] = None
    clip_fraction_max: AlignedOutput[float | None] = Field(0.95, ge=0.0, le=1.0)
    #: the new generation's own retrieval (self) is not worse than the live gallery's generation's on it (old-old):
    #: failing, it is neither promoted nor backfilled with, whatever else the rules say (a veto, not a backfill)
    require_not_worse: AlignedOutput[bool] = True


class BackfillParams(_Strict):
    """The decision rules (``rules``) and how a backfill runs (docs/design.md §7 "A backfill": bctflow backfill)."""

    rules: BackfillRules = BackfillRules()
    #: the checks that require a backfill and gate promotion (by the name the lineage shows: compatibility,
    #: p_com_floor, zeta_ceiling, max_generations_since_backfill, clip_fraction_max, not_worse); a failing check not
    #: named is a recorded warning. The default names those the lifecycle benchmark's precision and recall support
    #: and the two an operator turns on; null: every check gates (docs/design.md §7.4, §9.6)
    gate: AlignedOutput[list[str] | None] = ["compatibility", "not_worse", "p_com_floor",
                                             "max_generations_since_backfill"]  # fmt: skip

    @field_validator("gate")
    @classmethod
    def _known_checks(cls, v: list[str] | None) -> list[str] | None:
        known = ("compatibility", "p_com_floor", "zeta_ceiling", "max_generations_since_backfill",
                 "clip_fraction_max", "not_worse")  # fmt: skip
        unknown = [x for x in v or [] if x not in known]
        if unknown:
            raise ValueError(f"backfill.gate names no check {unknown}; use any of {', '.join(known)} (or null: all)")
        return v

    #: a full backfill rescales the gallery into the ζ₀ ball; ζ restarts from ζ₀
    restart_zeta: RunOption[bool] = True
    #: items per persisted chunk of every gallery embedding (resume granularity)
    chunk_size: RunOption[int] = Field(256, gt=0)
    throttle_seconds: RunOption[float] = Field(0.0, ge=0.0)  # pause between chunks to spare a shared GPU / serving host
    order: RunOption[Literal["uncertainty", "random", "oldest"]] = "uncertainty"  # partial backfill: what first
    #: where its chunks are embedded: ``local`` (this machine) or a Dask scheduler's address (``tcp://host:8786``)
    cluster: RunOption[str] = Field("local", pattern=r"^(local|(tcp|tls|ws|wss|inproc)://\S+)$")
    #: local: Dask worker processes on this machine (null: one, the command's own process, no cluster)
    workers: RunOption[int | None] = Field(None, ge=1)
    threads: RunOption[int] = Field(1, ge=1)  # torch threads per Dask worker
    #: chunks one Prefect task run embeds on the cluster (a 1B-item backfill is not a million task runs)
    chunks_per_task: RunOption[int] = Field(8, ge=1)
    #: the plan (`bctflow backfill --plan`): items embedded per gallery to measure the rate (first batch: warm-up)
    plan_sample: RunOption[int] = Field(2048, gt=0)
    #: the plan names the smallest 10% step of a partial backfill whose predicted served mAP reaches it (null: none)
    target_map: RunOption[float | None] = None

    @field_validator("target_map")
    @classmethod
    def _a_map(cls, v: float | None) -> float | None:
        if v is not None and not 0.0 < v <= 1.0:
            raise ValueError(f"target_map must be in (0, 1] (got {v}); it is a served mAP@R, e.g. 0.6 (null: none)")
        return v


class TrackingParams(_Strict):
    mlflow_uri: RunOption[str | None] = None  # default: the workspace's own MLflow store
    experiment: Output[str] = "bctflow"
    registered_model: Output[str] = "bctflow-embedder"


class LineageParams(_Strict):
    db_url: RunOption[str | None] = None  # any SQLAlchemy URL; default: the workspace's own database


class ScheduleParams(_Strict):
    """Nightly retraining: the schedule's one home (prefect.yaml is generated from it, flows/pipeline/deployment.py)."""

    cron: RunOption[str] = "0 2 * * *"
    timezone: RunOption[str] = "UTC"


class Params(_Strict):
    data: DataParams = DataParams()
    model: ModelParams = ModelParams()
    geometry: GeometryParams = GeometryParams()
    train: TrainParams = TrainParams()
    alignment: AlignmentParams = AlignmentParams()
    generations: list[GenerationSpec] = Field(default_factory=list)
    gallery: GalleryParams = GalleryParams()
    index: IndexParams = IndexParams()
    evaluation: EvaluationParams = EvaluationParams()
    backfill: BackfillParams = BackfillParams()
    tracking: TrackingParams = TrackingParams()
    lineage: LineageParams = LineageParams()
    schedule: ScheduleParams = ScheduleParams()
    serve: ServeParams = ServeParams()
    upgrade: UpgradeParams = UpgradeParams()
    lifecycle: LifecycleParams = LifecycleParams()

    @model_validator(mode="after")
    def _unique_generation_names(self) -> Params:
        if any(g.name is None for g in self.generations):
            raise ValueError("every entry of `generations:` needs a name; add name: g0, g1, ...")
        names = [g.name for g in self.generations]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(
                f"generation names must be unique (duplicated: {sorted(dup)}); rename them in `generations:`"
            )
        return self

    def declared_chain(self) -> list[GenerationSpec]:
        """The chain `dvc repro` / `bctflow chain` reproduce (ConfigError when params.yaml declares none)."""
        if not self.generations:
            raise ConfigError("params.yaml declares no `generations:`; add the chain to reproduce (see README)")
        return list(self.generations)

    def generation(self, name: str) -> GenerationSpec:
        for g in self.generations:
            if g.name == name:
                return g
        known = ", ".join(g.name for g in self.generations) or "none declared"
        raise ConfigError(
            f"unknown generation {name!r} (declared in params.yaml `generations:`: {known}); add it there or pick one "
            "of those"
        )

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def params_from_dict(raw: dict[str, Any] | None, source: str = "params") -> Params:
    """Validate a raw mapping into :class:`Params` (ConfigError on any problem)."""
    try:
        return Params.model_validate(raw or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, Params)) from None


def load_params(
    path: str | Path = DEFAULT_PARAMS_PATH, overrides: list[str] | None = None, values: dict[str, Any] | None = None
) -> Params:
    """Read params.yaml, apply ``KEY=VALUE`` overrides, then typed ``values`` by dotted key (a command's typed
    options), and validate, once (ConfigError on any problem)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(
            f"params file {p} does not exist; pass --params with an existing file, or leave --params out to use "
            "./params.yaml (else the defaults bctflow ships)"
        )
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{p} is not valid YAML ({err}); fix the syntax") from None
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"{p} must hold a mapping of sections (data:, model:, ...), not {type(raw).__name__}")
    raw = raw or {}
    if overrides:
        set_dotted(raw, parse_overrides(overrides))
    if values:
        set_dotted(raw, list(values.items()))
    return params_from_dict(raw, str(p) + (" with --set overrides" if overrides or values else ""))


def apply_overrides(params: Params, overrides: list[str] | dict[str, Any]) -> Params:
    """Return params with dotted-key overrides applied (``train.epochs=5``)."""
    raw = copy.deepcopy(params.as_dict())
    set_dotted(raw, list(overrides.items()) if isinstance(overrides, dict) else parse_overrides(overrides))
    return params_from_dict(raw, "overrides")


def params_digest(params: Params) -> str:
    """A stable sha256 of the parameters that shape a trained model (tagged ``model``, flows/params/tags.py): nightly
    change detection, run keys."""
    keys = [k for name, section in sections(Params).items() for k in select(section, name, lambda t: t.model)]
    return hashlib.sha256(json.dumps(pick(params.as_dict(), keys), sort_keys=True).encode()).hexdigest()
