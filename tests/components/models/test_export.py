"""The serving module (components/models/export.py): traced by torch.export, it gives the retrieval vectors bctflow's
own embedding path gives, for every head and feature kind, at any batch size."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

from components.models import build_model
from components.models.export import RetrievalEmbedder
from components.training.embed import embed_images, retrieval_vectors
from tests.helpers import tiny_spec

IMAGES = np.random.default_rng(1).integers(0, 256, (5, 8, 8, 1), dtype=np.uint8)


@pytest.mark.parametrize(
    "spec",
    [
        {},  # Lorentz, hard clip: hyperboloid points lifted in float64
        {"radial": "tanh", "learn_curvature": True},
        {"geometry": "euclidean", "bn_neck": True},
        {"head": "bt2", "geometry": "euclidean"},
        {"features": "psp"},
        {"features": "lsp", "geometry": "euclidean"},
        {"input_size": 16},  # resized inside the model
    ],
    ids=["lorentz", "lorentz-tanh-learned-K", "euclidean-bn", "bt2", "psp", "lsp", "resized"],
)
def test_the_exported_graph_gives_the_retrieval_vectors(spec: dict):
    torch.manual_seed(0)
    model = build_model(tiny_spec(**spec)).eval()
    program = torch.export.export(
        RetrievalEmbedder(model), (torch.from_numpy(IMAGES[:2]),), dynamic_shapes=[{0: Dim.AUTO}]
    ).module()
    with torch.no_grad():
        vectors = program(torch.from_numpy(IMAGES)).numpy()
        single = program(torch.from_numpy(IMAGES[:1])).numpy()  # traced with 2 images, run with 1
    s = model.spec
    expected = retrieval_vectors(embed_images(model, IMAGES), s.space.at(float(model.curvature.detach())), s.features)
    assert vectors.dtype == np.float32 and vectors.shape == expected.shape
    assert np.abs(vectors - expected).max() < 1e-5
    assert np.allclose(single, vectors[:1], atol=1e-6)
