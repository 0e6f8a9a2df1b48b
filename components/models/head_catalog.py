"""The head catalog: ``@register_head("name")`` on a :class:`HeadKind`, one module per head in ``models/heads/``.

``ModelSpec.head`` names an entry. The entry answers, from the spec alone, what the rest of the code asks of a
head — can the spec be built, how wide is the embedding z, which prefix of z stays comparable with the parent's
gallery, does the classifier read the embedding — and builds the head module. The spec, the model, the gallery and
the losses ask the entry (``HEADS.get(name)``) and never branch on a head's name, so a new head is one new file
(like an alignment method, :mod:`components.losses.catalog`): ``register_head``, ``create_head(name, spec,
in_features)``, ``list_heads()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import Tensor, nn

from components.errors import ConfigError
from components.plugins import Catalog

#: a :class:`components.models.spec.ModelSpec`: the spec asks this catalog, so this module does not import it
ModelSpec = Any

__all__ = ["HEADS", "HeadKind", "HeadOutput", "create_head", "list_heads", "register_head"]


@dataclass
class HeadOutput:
    """z: (B, D) tangent/raw vector; emb: (B, D) unit vectors or (B, D+1) hyperboloid points;
    clipped: (B,) bool, True where the norm hit the clip radius; cls_input: what the
    classifier sees (default: emb); aux: head-specific intermediates."""

    z: Tensor
    emb: Tensor
    clipped: Tensor
    cls_input: Tensor | None = None
    aux: dict[str, Tensor] = field(default_factory=dict)


class HeadKind:
    """One value of ``ModelSpec.head``: its rules and its module. Subclasses set ``name`` (by registering) and
    override what differs from the plain head (the whole z is the embedding, ``embed_dim`` wide, and the classifier
    reads it)."""

    name: ClassVar[str] = ""
    #: the classifier reads the retrieval embedding; False when it reads another part of the head
    #: (``HeadOutput.cls_input``, e.g. BT²'s φ3): a frozen old classifier then cannot score new embeddings
    classifies_embedding: ClassVar[bool] = True

    @classmethod
    def check(cls, spec: ModelSpec) -> None:
        """Refuse a spec this head cannot build (ValueError naming the fields)."""

    @classmethod
    def output_dim(cls, spec: ModelSpec) -> int:
        """Width D of the embedding z (B, D) (without a Lorentz model's time coordinate)."""
        return spec.embed_dim

    @classmethod
    def compat_prefix(cls, spec: ModelSpec) -> int | None:
        """Width of the prefix z[:, :n] that is compatible with the parent's gallery; None when the whole z is."""
        return None

    @classmethod
    def build(cls, spec: ModelSpec, in_features: int) -> nn.Module:
        """The head module: backbone features (B, in_features) → :class:`HeadOutput`. Its classifier input
        (``cls_input``, else ``emb``) is ``spec.embed_dim`` wide (+1 time coordinate for a Lorentz model); a Lorentz
        head holds the curvature K as its ``curvature`` property (a 0-d tensor)."""
        raise NotImplementedError


def _build(kind: type[HeadKind], spec: ModelSpec, in_features: int) -> nn.Module:
    return kind.build(spec, in_features)


HEADS: Catalog[type[HeadKind]] = Catalog(
    "head",
    "components.models.heads",
    ConfigError,
    "ModelSpec.head names a module of components/models/heads/; an alignment method sets it in model_overrides",
    name_attr="name",
    make=_build,
)

#: the catalog's face (components/plugins.py): ``@register_head("name")`` on a HeadKind subclass (its ``name``),
#: ``list_heads()``, ``create_head(name, spec, in_features)`` (the head module; a head takes no options)
register_head, list_heads, create_head = HEADS.register, HEADS.names, HEADS.create
