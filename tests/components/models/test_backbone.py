"""timm backbones, the small-image stem and local pretrained weights (components/models/backbone.py)."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from components.errors import CheckpointMismatchError, ConfigError
from components.models.backbone import (
    apply_small_stem,
    check_backbone_runs,
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


def test_load_pretrained_weights_refuses_foreign_files(tmp_path):
    dst = _timm_resnet(2)
    path = tmp_path / "foreign.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3), "fc.weight": torch.zeros(1, 1, 1, 1)}, path)
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


class _ItemNet(nn.Module):
    """A backbone whose forward reads a value (``.item()``): it cannot run on the meta device, but it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :1] * self.scale * float(x.sum().item() >= 0)


class _BrokenNet(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.missing_layer(x)


def test_a_backbone_that_runs_passes_the_forward_check_even_where_the_meta_device_cannot_run_it():
    with torch.device("meta"):
        model, feat = create_backbone("resnet18", in_chans=1, small_stem=True, kwargs=TINY)
        item_net = _ItemNet()
    check_backbone_runs(model, feat, name="resnet18", kwargs=TINY, in_chans=1, size=8)
    check_backbone_runs(item_net, 1, name="item_net", kwargs={}, in_chans=1, size=8)  # re-run on the CPU: it runs


def test_a_backbone_whose_forward_fails_is_refused_with_the_kwargs_to_change():
    with torch.device("meta"):
        model, feat = create_backbone("resnet18", in_chans=1, small_stem=True, kwargs={"channels": [8]})
    with pytest.raises(ConfigError) as info:
        check_backbone_runs(model, feat, name="resnet18", kwargs={"channels": [8]}, in_chans=1, size=8)
    msg = str(info.value)
    assert "timm backbone 'resnet18' with model.backbone_kwargs {'channels': [8]} fails on 1×8×8 images" in msg
    assert "AttributeError" in msg and "change or remove channels in model.backbone_kwargs" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"fails on 1×8×8 images .*choose a backbone that takes them"):
        check_backbone_runs(_BrokenNet(), 1, name="broken", kwargs={}, in_chans=1, size=8)


def test_the_feature_width_is_what_the_pooled_backbone_outputs():
    """timm's MobileNetV3 has a conv head after pooling: its output is head_hidden_size wide, not num_features."""
    with torch.device("meta"):
        model, feat = create_backbone("mobilenetv3_small_050", in_chans=1, small_stem=False)
    assert feat == 1024 and model.eval()(torch.zeros(2, 1, 32, 32, device="meta")).shape == (2, feat)
    check_backbone_runs(model, feat, name="mobilenetv3_small_050", kwargs={}, in_chans=1, size=32)


def test_pretrained_weights_of_other_shapes_are_refused_naming_every_tensor(tmp_path):
    """Weights of the same architecture at other widths share every name but no shape (only BatchNorm's scalar
    step counters fit): they are refused, never loaded in part."""
    torch.manual_seed(1)
    wider = timm.create_model("resnet18", pretrained=False, num_classes=0, in_chans=1, channels=[16, 16, 32, 32])
    path = tmp_path / "wider.pt"
    torch.save(wider.state_dict(), path)
    dst = _timm_resnet(2)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    with pytest.raises(CheckpointMismatchError) as info:
        load_pretrained_weights(dst, path)
    msg = str(info.value)
    assert f"pretrained weights {path} do not fit backbone ResNet: " in msg and "\n" not in msg
    assert "layer1.0.conv1.weight (file (16, 64, 3, 3), backbone (8, 64, 3, 3))" in msg
    assert "tensors there have other shapes" in msg and "model.pretrained_path" in msg
    assert all(torch.equal(dst.state_dict()[k], v) for k, v in before.items())  # nothing loaded


def test_the_stem_the_small_stem_replaces_takes_no_pretrained_tensor(tmp_path):
    """RGB ImageNet-style weights for a grey model: the 7×7 stem does not fit, which the small stem replaces anyway
    (its tensors are not loaded); without the small stem the stem must fit."""
    torch.manual_seed(1)
    rgb = timm.create_model("resnet18", pretrained=False, num_classes=0, in_chans=3, **TINY)
    path = tmp_path / "rgb.pt"
    torch.save(rgb.state_dict(), path)
    model, _ = create_backbone("resnet18", in_chans=1, small_stem=True, pretrained_path=path, kwargs=TINY)
    assert torch.equal(model.state_dict()["layer1.0.conv1.weight"], rgb.state_dict()["layer1.0.conv1.weight"])
    with pytest.raises(
        CheckpointMismatchError, match=r"conv1\.weight \(file \(64, 3, 7, 7\), backbone \(64, 1, 7, 7\)\)"
    ):
        create_backbone("resnet18", in_chans=1, small_stem=False, pretrained_path=path, kwargs=TINY)
