"""Embedding images with a trained model (components/training/embed.py) and device selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components.data import create_dataset
from components.errors import ConfigError
from components.geometry import create_space, expmap0
from components.models import build_model
from components.training import embed_images, retrieval_vectors, select_device
from tests.helpers import tiny_spec


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return create_dataset("digits", tmp_path_factory.mktemp("digits")).test.decode().images[:37]


@pytest.mark.parametrize("geometry, width", [("lorentz", 17), ("euclidean", 16)])
def test_embed_images_shapes_and_determinism(images, geometry, width):
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry=geometry))
    model.train()  # embed_images must switch to eval mode itself
    a = embed_images(model, images, batch_size=8, device="cpu")
    assert a.z.shape == (37, 16) and a.emb.shape == (37, width)
    assert a.logits.shape == (37, 10) and a.clipped.shape == (37,) and a.clipped.dtype == bool
    assert a.z.dtype == np.float32 and a.emb.dtype == np.float32 and a.logits.dtype == np.float32
    assert not model.training
    b = embed_images(model, images, batch_size=16, device="cpu")
    for name in ("z", "emb", "logits"):
        assert np.allclose(getattr(a, name), getattr(b, name), atol=1e-5), name
    # same as calling the model on the whole set at once
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        out = model.eval()(x)
    assert np.allclose(a.emb, out.emb.numpy(), atol=1e-5)
    assert np.array_equal(a.clipped, out.clipped.numpy())


def test_retrieval_vectors_lorentz_is_float64_lift_of_z(images):
    torch.manual_seed(0)
    model = build_model(tiny_spec(zeta=1.5))
    emb = embed_images(model, images, device="cpu")
    vec = retrieval_vectors(emb, create_space("lorentz", 1.0))
    assert vec.dtype == np.float64 and vec.shape == (37, 17)
    expected = expmap0(torch.from_numpy(emb.z).double(), 1.0).numpy()
    assert np.array_equal(vec, expected)
    assert np.allclose(vec, emb.emb, atol=1e-5)  # the float32 embedding is the same point
    inner = (vec[:, 1:] ** 2).sum(1) - vec[:, 0] ** 2
    assert np.allclose(inner, -1.0, atol=1e-12)


def test_retrieval_vectors_euclidean_are_the_unit_vectors(images):
    torch.manual_seed(0)
    emb = embed_images(build_model(tiny_spec(geometry="euclidean")), images, device="cpu")
    vec = retrieval_vectors(emb, create_space("euclidean", 1.0))
    assert vec.dtype == np.float64
    assert np.array_equal(vec, emb.emb.astype(np.float64))
    assert np.allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-6)


def test_select_device_on_this_machine():
    assert select_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert select_device("auto").type == "cpu"
        with pytest.raises(ConfigError, match="cuda"):
            select_device("cuda")


def test_retrieval_vectors_preserve_tangent_norm_for_curvature_half(images):
    torch.manual_seed(0)
    emb = embed_images(build_model(tiny_spec(curvature=0.5)), images[:8], device="cpu")
    vec = retrieval_vectors(emb, create_space("lorentz", 0.5))
    k = 0.5
    dist_to_origin = np.arccosh(np.sqrt(k) * vec[:, 0]) / np.sqrt(k)  # -K<o, x>_L = sqrt(K) x_t
    assert np.allclose(dist_to_origin, np.linalg.norm(emb.z.astype(np.float64), axis=1), atol=1e-9)


def test_precision_auto_is_bf16_on_cuda_only_and_unknown_values_are_refused():
    from components.training.device import use_bf16

    assert use_bf16(torch.device("cuda"), "auto") and not use_bf16(torch.device("cpu"), "auto")
    assert use_bf16(torch.device("cpu"), "bf16") and not use_bf16(torch.device("cuda"), "fp32")
    with pytest.raises(ConfigError, match="train.precision"):
        use_bf16(torch.device("cpu"), "fp16")


def test_cpu_bf16_embeddings_agree_with_fp32(images):
    """bf16 autocast + channels_last on CPU (train.precision: bf16) changes the numbers only at bf16 resolution."""
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry="euclidean"))
    fp32 = embed_images(model, images, batch_size=16, device="cpu", precision="fp32")
    bf16 = embed_images(model, images, batch_size=16, device="cpu", precision="bf16")
    assert fp32.emb.dtype == bf16.emb.dtype == np.float32
    cos = (fp32.emb * bf16.emb).sum(1)  # unit vectors
    assert cos.min() > 0.99 and not np.array_equal(fp32.emb, bf16.emb)
