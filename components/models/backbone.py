"""Backbones from timm by name, with a small-image stem and local pretrained weights; a forward check that they run.

``model.backbone_kwargs`` go to timm's constructor as they are, so a value the constructor accepts may still build a
network that cannot run (``channels: [8]`` for a four-stage ResNet): :func:`check_backbone_runs` runs one tiny batch
through a backbone — on the meta device where it was built there, which computes nothing — so planning refuses it
before training (flows/planning/checks.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from components.errors import CheckpointMismatchError, ConfigError, refusal_reason

__all__ = ["apply_small_stem", "check_backbone_runs", "create_backbone", "load_pretrained_weights"]


def apply_small_stem(model: nn.Module, in_chans: int) -> str:
    """Replace an ImageNet stem with a 3×3 stride-1 conv and no max-pool (docs/design.md §3); returns the name of the
    replaced convolution (its tensors are new: no pretrained tensor is loaded into them).

    For 8×8…32×32 inputs: the ImageNet stem (7×7/2 conv + 3×3/2 pool) shrinks
    32×32 to 8×8 before the first block and 8×8 to 2×2. Supported: timm's
    ResNet family (``conv1`` + ``maxpool``, incl. deep stems).
    """
    conv1 = getattr(model, "conv1", None)
    if conv1 is None or not hasattr(model, "maxpool"):
        raise ConfigError(
            "small_stem is only supported for ResNet-style timm backbones (conv1 + maxpool), "
            f"not {type(model).__name__}; "
            "set model.small_stem: false (for ViTs pass img_size/patch_size in model.backbone_kwargs instead)"
        )
    if isinstance(conv1, nn.Conv2d):
        model.conv1 = nn.Conv2d(in_chans, conv1.out_channels, 3, stride=1, padding=1, bias=False)
        replaced = "conv1"
    elif isinstance(conv1, nn.Sequential) and isinstance(conv1[0], nn.Conv2d):  # deep stem ('resnet*d', '*t')
        first = conv1[0]
        conv1[0] = nn.Conv2d(in_chans, first.out_channels, 3, stride=1, padding=1, bias=False)
        replaced = "conv1.0"
    else:
        raise ConfigError(f"cannot find the stem convolution of {type(model).__name__}; set model.small_stem: false")
    model.maxpool = nn.Identity()
    return replaced


def _read_state(p: Path) -> dict[str, object]:
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(p)))
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointMismatchError(
            f"cannot read pretrained weights {p} as a plain state dict ({refusal_reason(err)}); convert it to "
            ".safetensors where it was made"
        ) from None
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, dict):
        raise CheckpointMismatchError(f"pretrained weights {p} hold a {type(state).__name__}, not a state dict")
    return state


def _shape(value: object) -> str:
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"


def load_pretrained_weights(model: nn.Module, path: str | Path, fresh: tuple[str, ...] = ()) -> list[str]:
    """Load backbone weights from a local file (.safetensors, .pt, .pth, .bin); returns the names of backbone
    tensors the file does not hold (they keep their initialisation).

    Never unpickles arbitrary objects (``weights_only=True``). Tensors the backbone does not have (a classifier
    head) are skipped, and so are those of the modules named in ``fresh`` (replaced by the caller: the small stem).
    Every other tensor must have the backbone's shape: weights of another architecture, or of other
    ``backbone_kwargs``, are refused whole, naming the tensors that do not fit — never loaded in part.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"pretrained weights file {p} does not exist; "
            "download it once (e.g. from the timm hub) and set model.pretrained_path"
        )
    state = _read_state(p)
    own = model.state_dict()
    shared = {k: v for k, v in state.items() if k in own and not any(k == f or k.startswith(f + ".") for f in fresh)}
    if not shared:
        raise CheckpointMismatchError(
            f"no tensor in {p} fits backbone {type(model).__name__}; check that the file belongs to this architecture"
        )
    wrong = [k for k, v in shared.items() if not isinstance(v, torch.Tensor) or v.shape != own[k].shape]
    if wrong:
        shown = ", ".join(f"{k} (file {_shape(shared[k])}, backbone {tuple(own[k].shape)})" for k in wrong[:3])
        raise CheckpointMismatchError(
            f"pretrained weights {p} do not fit backbone {type(model).__name__}: {len(wrong)} of its {len(shared)} "
            f"tensors there have other shapes, e.g. {shown}; they belong to another architecture or other "
            "model.backbone_kwargs: point model.pretrained_path at weights of this one, or unset it"
        )
    model.load_state_dict(shared, strict=False)
    return sorted(set(own) - set(shared))


def create_backbone(
    name: str,
    *,
    in_chans: int,
    small_stem: bool,
    pretrained_path: str | Path | None = None,
    kwargs: dict[str, Any] | None = None,
) -> tuple[nn.Module, int]:
    """A timm backbone without classifier (pooled features). Returns (module, feature_dim)."""
    import timm

    if name not in timm.list_models():
        raise ConfigError(f"unknown timm backbone {name!r}; pick a name from timm.list_models(), e.g. 'resnet18'")
    try:
        model = timm.create_model(name, pretrained=False, num_classes=0, in_chans=in_chans, **(kwargs or {}))
    except TypeError as err:
        raise ConfigError(f"timm backbone {name!r} rejected model.backbone_kwargs {kwargs}: {err}") from None
    except Exception as err:  # any other failure of the constructor on user-given options
        if not kwargs:
            raise
        raise ConfigError(
            f"timm backbone {name!r} rejected model.backbone_kwargs {kwargs} ({_reason(err)}); change or remove "
            f"{', '.join(kwargs)} in model.backbone_kwargs"
        ) from None
    fresh = (apply_small_stem(model, in_chans),) if small_stem else ()
    if pretrained_path is not None:
        load_pretrained_weights(model, pretrained_path, fresh)
    # the width of the pooled output: after a conv head (MobileNetV3) that is head_hidden_size, not num_features
    return model, int(getattr(model, "head_hidden_size", None) or model.num_features)


def _reason(err: Exception) -> str:
    text = str(err).splitlines()[0][:200] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _forward(backbone: nn.Module, device: torch.device | str, in_chans: int, size: int) -> torch.Tensor:
    was_training = backbone.training
    try:
        with torch.no_grad():
            return backbone.eval()(torch.zeros(2, in_chans, size, size, device=device))
    finally:
        backbone.train(was_training)


def check_backbone_runs(
    backbone: nn.Module, feat_dim: int, *, name: str, kwargs: dict[str, Any], in_chans: int, size: int
) -> None:
    """A batch of two ``in_chans``×``size``×``size`` images goes through ``backbone`` and comes out ``feat_dim`` wide;
    ConfigError naming the backbone, its kwargs and the fix otherwise.

    Runs on the backbone's device: on the meta device (a model built there to be checked) nothing is computed. An
    operation the meta device cannot run is no refusal: the backbone is then materialised on the CPU, uninitialised
    (``to_empty``), and run there."""
    device = next(iter(backbone.parameters()), torch.empty(0)).device
    try:
        out = _forward(backbone, device, in_chans, size)
    except Exception as err:
        if device.type != "meta":
            raise ConfigError(_cannot_run(name, kwargs, in_chans, size, err)) from None
        try:
            out = _forward(backbone.to_empty(device="cpu"), "cpu", in_chans, size)
        except Exception as cpu_err:
            raise ConfigError(_cannot_run(name, kwargs, in_chans, size, cpu_err)) from None
    if out.ndim != 2 or out.shape[1] != feat_dim:
        raise ConfigError(
            f"timm backbone {name!r} outputs features of shape {tuple(out.shape[1:])}, not the {feat_dim} it declares; "
            "choose another backbone"
        )


def _cannot_run(name: str, kwargs: dict[str, Any], in_chans: int, size: int, err: Exception) -> str:
    where = f"timm backbone {name!r} with model.backbone_kwargs {kwargs}" if kwargs else f"timm backbone {name!r}"
    fix = (
        f"change or remove {', '.join(kwargs)} in model.backbone_kwargs (they must fit timm's {name} and each other)"
        if kwargs
        else "choose a backbone that takes them, or give its size options (e.g. img_size) in model.backbone_kwargs"
    )
    return f"{where} fails on {in_chans}×{size}×{size} images ({_reason(err)}); {fix}"
