"""Benchmark profiles (``benchmarks/profiles/<name>.yaml``): params overrides + benchmark settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchmarks.selection import P_UP_FLOOR
from components.errors import ConfigError
from flows.params import Params, apply_overrides, flatten_overrides, load_params

__all__ = [
    "CRITERION_ROLES",
    "PROFILE_DIR",
    "Arch",
    "BenchSettings",
    "BudgetPoint",
    "BudgetSettings",
    "HeadEntry",
    "MethodEntry",
    "Profile",
    "load_profile",
]

PROFILE_DIR = Path(__file__).parent / "profiles"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MethodEntry(_Strict):
    """One row of the table: a registered alignment method with options, in a geometry."""

    name: str
    method: str
    geometry: Literal["euclidean", "lorentz"] = "euclidean"
    options: dict[str, Any] = Field(default_factory=dict)
    tune: bool = False  # select λ on the validation split from BenchSettings.tune_weights
    weight: float | None = None  # fixed λ (default: params alignment.weight)
    #: params overrides for this method's new model only, e.g. {"geometry.delta_zeta": 0.1} (ablations)
    params: dict[str, Any] = Field(default_factory=dict)
    #: the method's own options tried at seed 0, every combination, over ``options`` (e.g. {"tau": [0.5, 1.0]}: its
    #: temperature); each combination is one more configuration per head and λ
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    #: the heads of its geometry it is tried with, by name (empty: every one; e.g. [clip]: a paper's exact head)
    heads: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _grid_lists(self) -> MethodEntry:
        empty = [k for k, v in self.grid.items() if not v]
        if empty:
            raise ValueError(f"method {self.name!r}: grid {empty} must list at least one value each")
        from components.losses import choose_alignment  # here: the losses import torch, `bctflow --help` must not

        for k, values in self.grid.items():
            for v in values:
                try:  # an option the method does not have, or a value it refuses, fails here, before any training
                    choose_alignment(self.method, {**self.options, k: v})
                except ConfigError as err:
                    raise ValueError(f"method {self.name!r}: grid {k}={v!r}: {err}") from None
        return self


class HeadEntry(_Strict):
    """A head the protocol may give a lineage of ``geometry`` (old model, φ* and new model alike): a Euclidean
    classifier / neck, or a Lorentz head's radius handling (design §3.2)."""

    name: str
    #: params overrides of the head, e.g. {"model.classifier": "linear", "model.bn_neck": false} or
    #: {"geometry.radial": "tanh", "geometry.learn_scale": true}
    params: dict[str, Any] = Field(default_factory=dict)
    geometry: Literal["euclidean", "lorentz"] = "euclidean"


class Arch(_Strict):
    backbone: str
    backbone_kwargs: dict[str, Any] = Field(default_factory=dict)
    pretrained_path: str | None = None
    small_stem: bool | None = None  # None: params model.small_stem
    input_size: int | None = None  # resize inside the model (a ViT-B/16 wants 224)

    def overrides(self) -> dict[str, Any]:
        """ModelSpec fields this architecture sets."""
        out: dict[str, Any] = {}
        if self.small_stem is not None:
            out["small_stem"] = self.small_stem
        if self.input_size is not None:
            out["input_size"] = self.input_size
        return out


#: the roles ``bench.train_criterion`` holds unless a profile says otherwise (``criterion_roles``)
CRITERION_ROLES = ("old", "reference")


class BenchSettings(_Strict):
    methods: list[MethodEntry]
    seeds: list[int] = Field(default_factory=lambda: [0, 1])
    #: methods retrained with the extra seeds at the configuration chosen at seed 0 ("best_baseline" = the Euclidean
    #: method with the best validation mAP P_com; "all" = every method, PSP / LSP on each seed's own φ*)
    extra_seed_methods: list[str] = Field(default_factory=lambda: ["hbct", "best_baseline"])
    validation_fraction: float = Field(0.1, gt=0.0, lt=0.5)
    tune_weights: list[float] = Field(default_factory=lambda: [0.3, 1.0])
    #: the selection rule's constraint (benchmarks/selection.py): validation mAP P_up ≥ this
    p_up_floor: float = Field(P_UP_FLOOR, le=0.0)
    old_arch: Arch
    new_arch: Arch
    old_fraction: float = Field(0.3, gt=0.0, le=1.0)  # ext_data
    old_class_fraction: float = Field(0.5, gt=0.0, lt=1.0)  # ext_class / both
    scenario_epochs: dict[str, int] = Field(default_factory=dict)
    #: the last-epoch train accuracy every old model and φ* (``criterion_roles``) is trained to: one below it is
    #: trained again from scratch with twice the epochs, up to ``criterion_max_factor`` times its scenario's (None: no
    #: criterion). New models keep φ*'s budget (equal budget); the report lists every role's train accuracy and steps
    train_criterion: float | None = Field(None, gt=0.0, lt=1.0)
    criterion_max_factor: int = Field(8, ge=1)
    #: the roles held to it: the old model (the gallery a method aligns to) and φ* (the denominator); a study of the
    #: training budget holds only the old model to it, so that φ* and the new models share the budget studied
    criterion_roles: list[Literal["old", "reference"]] = Field(default_factory=lambda: list(CRITERION_ROLES))
    sequential_stages: int = Field(5, ge=2)
    sequential_switch_at: int = Field(3, ge=1)
    sequential_methods: list[str] = Field(default_factory=list)
    #: the Euclidean heads each tuned Euclidean method is tried with, the best chosen on the validation split
    #: (default: the params' own head only)
    euclidean_heads: list[HeadEntry] = Field(default_factory=lambda: [HeadEntry(name="params")])
    #: the same for the Lorentz methods: each Lorentz head (radius handling) with its own old model and φ*
    lorentz_heads: list[HeadEntry] = Field(default_factory=lambda: [HeadEntry(name="params", geometry="lorentz")])

    @model_validator(mode="after")
    def _heads_fit(self) -> BenchSettings:
        for field in ("euclidean_heads", "lorentz_heads"):
            g, heads = field.removesuffix("_heads"), getattr(self, field)
            if not heads or any(h.geometry != g for h in heads):
                raise ValueError(f"{g}_heads must be a non-empty list of heads with geometry: {g}")
            if len({h.name for h in heads}) != len(heads):
                raise ValueError(f"{g}_heads: head names must be unique")
        if self.train_criterion is not None and not self.criterion_roles:
            raise ValueError("criterion_roles is empty while train_criterion is set; name the roles it holds (old, "
                             "reference) or drop train_criterion")  # fmt: skip
        for m in self.methods:
            known = [h.name for h in self.heads(m.geometry)]
            unknown = [h for h in m.heads if h not in known]
            if unknown:
                raise ValueError(f"method {m.name!r}: heads {unknown} are not {m.geometry}_heads {known}; name those")
        return self

    def heads(self, geometry: str) -> list[HeadEntry]:
        """The heads the protocol tries for methods of ``geometry``; the first is the lineage's default."""
        return getattr(self, f"{geometry}_heads")


class BudgetPoint(_Strict):
    """One training budget of ``bctflow bench budget``: training images per class (before the validation split is
    carved from them) and epochs, the seeds it runs with, and where it is meant to run."""

    per_class: int = Field(gt=0)
    epochs: int = Field(gt=0)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    #: "cpu": a 2-core machine runs it in minutes; "gpu": it needs a lent GPU (scripts/gpu_budget.sh runs those)
    where: Literal["cpu", "gpu"] = "cpu"

    @property
    def tag(self) -> str:
        """The point's table folder suffix: ``<scenario>-n<per_class>-e<epochs>``."""
        return f"n{self.per_class}-e{self.epochs}"

    @property
    def overrides(self) -> list[str]:
        """The params overrides that set the budget."""
        return [f"data.max_train_per_class={self.per_class}", f"train.epochs={self.epochs}"]


class BudgetSettings(_Strict):
    """How the ranking moves with the training budget: one scenario's method table at each point."""

    scenario: Literal["ext_class", "ext_data"] = "ext_class"
    points: list[BudgetPoint] = Field(min_length=1)


class Profile(_Strict):
    name: str
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    bench: BenchSettings
    #: ``bctflow bench lifecycle``'s stream (benchmarks/lifecycle_stream.py StreamSettings; empty: its defaults)
    lifecycle: dict[str, Any] = Field(default_factory=dict)
    #: ``bctflow bench budget``'s points (benchmarks/budget.py); None: the profile has no budget study
    budget: BudgetSettings | None = None

    def resolved_params(self, base: Params) -> Params:
        """``base`` (the params file) with :data:`MEASURED_DEFAULTS` and then the profile's own params applied."""
        return apply_overrides(base, {**MEASURED_DEFAULTS, **flatten_overrides(self.params)})


#: The params defaults every profile was measured with where the shipped defaults have moved since (the Lorentz
#: head, the alignment method and λ: docs/methods.md, "What the defaults follow"). A profile runs under them and then
#: its own params, so its models, cache keys and committed records stay the ones measured; a profile that wants the
#: shipped defaults names them.
MEASURED_DEFAULTS: dict[str, Any] = {
    "geometry.radial": "clip",
    "model.mlr_scale": 1.0,
    "train.label_smoothing": 0.0,
    "alignment.method": "hbct",
    "alignment.weight": 0.3,
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_profile(path: Path) -> dict[str, Any]:
    """A profile's YAML; ``extends: <name>`` deep-merges it onto another profile (lists are replaced)."""
    raw = yaml.safe_load(path.read_text()) or {}
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    base_path = path.parent / f"{parent}.yaml"
    if not base_path.exists():
        raise ConfigError(
            f"profile {path.name} extends unknown profile {parent!r}; "
            f"available: {', '.join(sorted(p.stem for p in path.parent.glob('*.yaml')))}"
        )
    base = _read_profile(base_path)
    base.pop("description", None)
    return _merge(base, raw)


def load_profile(name_or_path: str, params_path: str | Path = "params.yaml") -> tuple[Profile, Params]:
    """A profile by name (benchmarks/profiles/<name>.yaml) or path, and the params it runs with."""
    path = Path(name_or_path)
    if not path.exists():
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise ConfigError(f"unknown benchmark profile {name_or_path!r}; available: {known} (or pass a YAML path)")
    try:
        raw = _read_profile(path)
        profile = Profile.model_validate({"name": path.stem, **raw})
    except (yaml.YAMLError, ValidationError) as err:
        raise ConfigError(f"invalid benchmark profile {path}: {err}") from None
    base = load_params(params_path) if Path(params_path).exists() else Params()
    return profile, profile.resolved_params(base)
