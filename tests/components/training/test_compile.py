"""torch.compile of the training step (components/training/compile.py): the setting, and a compiled run that trains
the model an eager run trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components.errors import ConfigError
from components.losses import create_alignment
from components.models import build_model
from components.training import train_model
from components.training.compile import compiled, use_compile
from tests.helpers import tiny_spec, train_config

CPU = torch.device("cpu")


def test_auto_compiles_on_cuda_only_and_on_off_force_it():
    assert use_compile(torch.device("cuda", 0), "auto") is True
    assert use_compile(CPU, "auto") is False
    assert use_compile(CPU, "on") is True
    assert use_compile(torch.device("cuda", 0), "off") is False


def test_unknown_setting_and_mode_are_refused_naming_the_param():
    with pytest.raises(ConfigError, match=r"unknown compile setting 'fast'.*train\.compile"):
        use_compile(CPU, "fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"unknown compile mode 'turbo'.*train\.compile_mode"):
        compiled(torch.nn.Identity(), CPU, "on", "turbo")  # type: ignore[arg-type]


def test_off_returns_the_module_itself():
    module = torch.nn.Linear(2, 2)
    assert compiled(module, CPU, "off") is module
    assert compiled(module, CPU, "auto") is module  # a CPU stays eager under auto


def test_compiled_training_matches_eager_and_saves_the_plain_module(tmp_path):
    """Two HBCT steps (the old model's forward compiled too) on CPU through inductor: the same losses and weights as
    eager up to float rounding, and checkpoints keyed like the module (no ``_orig_mod.`` prefix)."""
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.random((32, 1, 8, 8), dtype=np.float32))
    labels = torch.from_numpy(rng.integers(0, 10, 32))
    from components.data.batches import ImageTensor

    data = ImageTensor(images, labels)
    # one block a stage (ResNet-10 depth): half the graph to compile (cold inductor cache, alone: 92 s → 73 s)
    spec = tiny_spec(backbone_kwargs={"channels": [8, 8, 16, 16], "layers": [1, 1, 1, 1]})
    torch.manual_seed(1)
    old = build_model(spec).eval()
    results = {}
    for setting in ("off", "on"):
        torch.manual_seed(0)
        cfg = train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", crop_padding=0, hflip=False, compile=setting)
        results[setting] = train_model(
            build_model(spec), data, cfg, create_alignment("hbct"), tmp_path / setting, old_model=old
        )
    eager, comp = results["off"], results["on"]
    for key in ("loss", "base", "train_accuracy"):
        assert comp.history[0][key] == pytest.approx(eager.history[0][key], rel=1e-4, abs=1e-5)
    for (name, a), (_, b) in zip(eager.model.state_dict().items(), comp.model.state_dict().items(), strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4), name
    saved = torch.load(next((tmp_path / "on").glob("epoch_*.pt")), weights_only=True)
    assert set(saved["model"]) == set(eager.model.state_dict())
