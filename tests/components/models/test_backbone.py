"""timm backbones, the small-image stem and local pretrained weights (components/models/backbone.py)."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from components.errors import CheckpointMismatchError, ConfigError
from components.models.backbone import (
    apply_small_stem,
    create_backbone,
    load_pretrained_weights,
)

TINY = {"channels": [8, 8, 16, 16]}


def _layer1_hw(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    seen = {}

    def hook(module, inputs, output):
        seen["shape"] = output.shape  # returns None: the output is left unchanged

    handle = model.layer1.register_forward_hook(hook)
    try:
        model(x)
    finally:
        handle.remove()
    return tuple(seen["shape"][-2:])


def test_small_stem_keeps_8x8_resolution_and_pools_features():
    torch.manual_seed(0)
    model, feat = create_backbone("resnet18", in_chans=1, small_stem=True, kwargs=TINY)
    assert feat == 16  # last stage width
    conv1 = model.conv1
    assert isinstance(conv1, nn.Conv2d)
    assert conv1.kernel_size == (3, 3) and conv1.stride == (1, 1) and conv1.padding == (1, 1)
    assert conv1.in_channels == 1
    assert isinstance(model.maxpool, nn.Identity)
    x = torch.rand(3, 1, 8, 8)
    out = model.eval()(x)
    assert out.shape == (3, feat)
    assert torch.isfinite(out).all()
    assert _layer1_hw(model, x) == (8, 8)


def test_imagenet_stem_shrinks_small_inputs():
    model, _ = create_backbone("resnet18", in_chans=1, small_stem=False, kwargs=TINY)
    assert model.conv1.stride == (2, 2) and not isinstance(model.maxpool, nn.Identity)
    assert _layer1_hw(model.eval(), torch.rand(2, 1, 8, 8)) == (2, 2)


def test_unknown_backbone_is_config_error():
    with pytest.raises(ConfigError, match="no_such_net"):
        create_backbone("no_such_net", in_chans=1, small_stem=False)


def test_bad_backbone_kwargs_are_config_error():
    with pytest.raises(ConfigError, match="backbone_kwargs"):
        create_backbone("resnet18", in_chans=1, small_stem=False, kwargs={"no_such_kwarg": 1})


def test_small_stem_refuses_non_resnet_modules():
    with pytest.raises(ConfigError, match="small_stem"):
        apply_small_stem(nn.Sequential(nn.Linear(2, 2)), in_chans=1)


def _timm_resnet(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("resnet18", pretrained=False, num_classes=0, in_chans=1, **TINY)


@pytest.mark.parametrize("wrap", [None, "state_dict"])
def test_load_pretrained_weights_copies_tensors(tmp_path, wrap):
    src, dst = _timm_resnet(1), _timm_resnet(2)
    key = "layer2.0.conv1.weight"
    assert not torch.equal(src.state_dict()[key], dst.state_dict()[key])
    state = src.state_dict()
    path = tmp_path / "weights.pt"
    torch.save({wrap: state} if wrap else state, path)
    missing = load_pretrained_weights(dst, path)
    assert missing == []
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k


def test_load_pretrained_weights_from_safetensors(tmp_path):
    from safetensors.torch import save_file

    src, dst = _timm_resnet(1), _timm_resnet(2)
    path = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items() if k.startswith("layer")}, str(path))
    missing = load_pretrained_weights(dst, path)
    assert torch.equal(dst.state_dict()["layer3.0.conv2.weight"], src.state_dict()["layer3.0.conv2.weight"])
    assert "conv1.weight" in missing  # not in the file: reported as left at random init
    assert not torch.equal(dst.state_dict()["conv1.weight"], src.state_dict()["conv1.weight"])


def test_load_pretrained_weights_skips_wrong_shapes_and_refuses_foreign_files(tmp_path):
    dst = _timm_resnet(2)
    path = tmp_path / "foreign.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3), "layer1.0.conv1.weight": torch.zeros(1, 1, 1, 1)}, path)
    with pytest.raises(CheckpointMismatchError, match="no tensor"):
        load_pretrained_weights(dst, path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_pretrained_weights(dst, tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a torch file at all")
    with pytest.raises(CheckpointMismatchError, match="cannot read") as info:
        load_pretrained_weights(dst, garbage)
    assert "weights_only" not in str(info.value)  # never advises the unsafe load torch's message recommends


def test_create_backbone_with_pretrained_path_loads_the_blocks(tmp_path):
    src = _timm_resnet(1)
    path = tmp_path / "weights.pt"
    torch.save(src.state_dict(), path)
    torch.manual_seed(5)
    model, _ = create_backbone("resnet18", in_chans=1, small_stem=True, pretrained_path=path, kwargs=TINY)
    assert torch.equal(model.state_dict()["layer4.1.conv2.weight"], src.state_dict()["layer4.1.conv2.weight"])
    # the 7x7 stem does not fit the small 3x3 stem, which is freshly initialised
    assert model.conv1.weight.shape[-2:] == (3, 3)
