"""What each params.yaml key shapes: one tag, declared with the field in flows/params/schema.py; every key list comes
from it.

Each field of a params section carries one :class:`Shapes` in its ``Annotated`` metadata, written with the aliases
below (``epochs: Model[int] = Field(30, gt=0)``). A nested model (``data.augment``, ``backfill.rules``) carries no
tag of its own: its fields do. From the tags come the params digest's keys (:func:`flows.params.params_digest`: run
keys and the nightly change check) and the params each DVC stage tracks (:mod:`flows.pipeline.dvc_yaml`); no other list
of
keys exists, so a new field is classified where it is declared, once (tests/flows/params/test_param_tags.py checks that
every field is tagged).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = [
    "AlignedModel",
    "AlignedOutput",
    "Data",
    "Model",
    "Output",
    "RunOption",
    "Shapes",
    "leaf_tags",
    "pick",
    "sections",
    "select",
]


@dataclass(frozen=True)
class Shapes:
    """What one params field shapes.

    ``generations``: whose outcome it shapes: ``every`` generation's, only an ``aligned`` one's (a generation with a
    parent: its alignment, the growth of ζ, its independent reference, its backfill decision; generation 0 trains
    base-only at ζ₀), or ``none`` (a run option: where or how a run goes, not what it gives). ``model``: it shapes
    the trained weights, so the params digest covers it. ``data_stage``: the DVC data stage, which writes every
    generation's data manifest, depends on it.
    """

    generations: Literal["every", "aligned", "none"]
    model: bool = False
    data_stage: bool = False

    def shapes_generation(self, aligned: bool) -> bool:
        """Whether it shapes a generation (``aligned``: one with a parent), so that generation's DVC stage tracks it."""
        return self.generations == "every" or (aligned and self.generations == "aligned")


T = TypeVar("T")
#: the trained model of every generation
Model = Annotated[T, Shapes("every", model=True)]
#: the data every generation trains on: which dataset, its split and subsampling (the data stage's manifests)
Data = Annotated[T, Shapes("every", model=True, data_stage=True)]
#: the trained model of an aligned generation only: its alignment, the growth of its ζ
AlignedModel = Annotated[T, Shapes("aligned", model=True)]
#: what every generation's stage gives besides the model: its gallery and index, its metrics, its MLflow names
Output = Annotated[T, Shapes("every")]
#: what only an aligned generation's stage gives: its independent reference, its backfill decision
AlignedOutput = Annotated[T, Shapes("aligned")]
#: nothing trained: where the stores are, the device, process counts, how a backfill runs
RunOption = Annotated[T, Shapes("none")]


def _nested(field: FieldInfo) -> type[BaseModel] | None:
    ann = field.annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _tag(field: FieldInfo, key: str) -> Shapes:
    tags = [m for m in field.metadata if isinstance(m, Shapes)]
    if len(tags) != 1:
        raise TypeError(
            f"params field {key} carries {len(tags)} Shapes tags, not one; declare it with one of Model[...], "
            "Data[...], AlignedModel[...], Output[...], AlignedOutput[...], RunOption[...] (flows/params/tags.py)"
        )
    return tags[0]


def sections(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The sections of ``root`` (its fields that are models), in declaration order; ``generations:`` is no section."""
    return {name: sub for name, field in root.model_fields.items() if (sub := _nested(field)) is not None}


def leaf_tags(model: type[BaseModel], prefix: str) -> dict[str, Shapes]:
    """Every leaf field under ``prefix`` (a nested model's fields, not the model) by dotted key → its tag, in
    declaration order (TypeError for a field without exactly one tag)."""
    out: dict[str, Shapes] = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        sub = _nested(field)
        out.update(leaf_tags(sub, key) if sub is not None else {key: _tag(field, key)})
    return out


def select(model: type[BaseModel], prefix: str, keep: Callable[[Shapes], bool]) -> list[str]:
    """The dotted keys under ``prefix`` covering exactly the leaves ``keep`` accepts, in declaration order: a node is
    named whole when every leaf under it is kept (``model``, ``data.augment``), else key by key; [] when none is."""
    keys: list[str] = []
    whole = True
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        sub = _nested(field)
        part = select(sub, key, keep) if sub is not None else ([key] if keep(_tag(field, key)) else [])
        whole = whole and part == [key]
        keys.extend(part)
    return [prefix] if whole else keys


def pick(raw: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """The part of the nested mapping ``raw`` that the dotted ``keys`` name, nested the same way."""
    out: dict[str, Any] = {}
    for key in keys:
        *parents, last = key.split(".")
        src, dst = raw, out
        for part in parents:
            src, dst = src[part], dst.setdefault(part, {})
        dst[last] = src[last]
    return out
