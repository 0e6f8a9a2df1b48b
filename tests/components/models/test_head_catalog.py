"""The head catalog (components/models/head_catalog.py): ModelSpec.head names an entry, and the spec, the model, the
gallery and the checkpoint ask the entry — a new head is one registered class, nothing else changes."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.errors import CheckpointMismatchError, ConfigError
from components.indexing.gallery import GalleryEmbeddings
from components.models import build_model, load_model, save_model
from components.models.checkpoint import MODEL_FORMAT, save_torch_atomic
from components.models.head_catalog import HEADS, HeadKind, HeadOutput, register_head
from components.training.embed import embed_images
from tests.helpers import tiny_spec

IMAGES = np.random.default_rng(0).integers(0, 256, (6, 8, 8, 1), dtype=np.uint8)


def test_the_builtin_heads_are_registered_and_say_their_widths():
    assert {"standard", "bt2"} <= set(HEADS.names())
    std, bt2 = tiny_spec(embed_dim=16), tiny_spec(geometry="euclidean", head="bt2", compat_dim=12, extra_dims=4)
    assert (std.output_dim, std.compat_prefix, std.stored_dim) == (16, None, 17)
    assert (bt2.output_dim, bt2.compat_prefix, bt2.stored_dim) == (20, 12, 20)
    assert tiny_spec(geometry="euclidean", head="bt2", extra_dims=4).compat_prefix == 16  # compat_dim defaults to m
    assert HEADS.get("standard").classifies_embedding and not HEADS.get("bt2").classifies_embedding
    assert build_model(std).classifies_embedding and not build_model(bt2).classifies_embedding


def test_an_unknown_head_is_refused_with_the_available_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown head 'wide'; available: .*bt2.*standard"):
        tiny_spec(head="wide")
    path = tmp_path / "m.pt"  # a checkpoint naming a head this code does not have
    meta = tiny_spec().to_dict() | {"head": "wide"}
    save_torch_atomic({"format": MODEL_FORMAT, "metadata": meta, "state_dict": {}}, path)
    with pytest.raises(CheckpointMismatchError, match="unknown head 'wide'"):
        load_model(path)


def test_a_bt2_checkpoint_keeps_its_metadata_and_loads_to_the_same_model(tmp_path):
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry="euclidean", head="bt2", compat_dim=12, extra_dims=4)).eval()
    path = tmp_path / "bt2.pt"
    save_model(model, path)
    meta = torch.load(path, weights_only=True)["metadata"]
    assert {k: meta[k] for k in ("head", "compat_dim", "extra_dims", "bt2_scale")} == {
        "head": "bt2",
        "compat_dim": 12,
        "extra_dims": 4,
        "bt2_scale": 1.0,
    }
    x = torch.from_numpy(IMAGES).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        a, b = model(x), load_model(path, expected=model.spec)(x)
    assert torch.equal(a.z, b.z) and torch.equal(a.logits, b.logits)


class _Doubled(nn.Module):
    """z = [e; e·0.5] for a unit vector e: twice embed_dim wide, its first half the compatible prefix."""

    def __init__(self, in_features: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)

    def forward(self, feats: Tensor) -> HeadOutput:
        e = F.normalize(self.proj(feats), dim=-1)
        z = torch.cat([e, 0.5 * e], dim=-1)
        return HeadOutput(z, F.normalize(z, dim=-1), torch.zeros(len(z), dtype=torch.bool), cls_input=e)


@pytest.fixture
def doubled():
    @register_head("test_doubled")
    class Doubled(HeadKind):
        classifies_embedding: ClassVar[bool] = False

        @classmethod
        def check(cls, spec):
            if spec.geometry != "euclidean":
                raise ValueError("test_doubled is Euclidean")

        @classmethod
        def output_dim(cls, spec):
            return 2 * spec.embed_dim

        @classmethod
        def compat_prefix(cls, spec):
            return spec.embed_dim

        @classmethod
        def build(cls, spec, in_features):
            return _Doubled(in_features, spec.embed_dim)

    yield Doubled
    HEADS.unregister("test_doubled")


def test_a_new_head_is_one_registered_class(doubled):
    """Spec widths, the model, its gallery and cross retrieval against a plain parent: no other code knows it."""
    with pytest.raises(ValueError, match="test_doubled is Euclidean"):
        tiny_spec(head="test_doubled")
    spec = tiny_spec(geometry="euclidean", head="test_doubled", embed_dim=8)
    assert (spec.output_dim, spec.stored_dim, spec.compat_prefix) == (16, 16, 8)
    torch.manual_seed(0)
    model = build_model(spec).eval()
    emb = embed_images(model, IMAGES)
    assert emb.z.shape == (6, 16) and emb.logits.shape == (6, 10)
    ids, labels = np.arange(6), np.arange(6) % 3
    new = GalleryEmbeddings.from_embeddings(emb, spec, 1.0, ids, labels)
    parent_spec = tiny_spec(geometry="euclidean", embed_dim=8)
    parent = GalleryEmbeddings.from_embeddings(
        embed_images(build_model(parent_spec).eval(), IMAGES), parent_spec, 1.0, ids, labels
    )
    assert new.compat_dim == 8 and parent.compat_dim is None
    assert new.incompatibility(parent) is None and parent.incompatibility(new) == "dimension 8 vs 16"
    queries = new.vectors_against(parent)  # the prefix e, already a unit vector
    assert np.allclose(queries, emb.z[:, :8], atol=1e-6)
