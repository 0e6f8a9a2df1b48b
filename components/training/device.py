"""Device selection and the fast paths (bf16 autocast and channels_last, chosen by ``train.precision``; pinned
memory on CUDA)."""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from torch import nn

from components.errors import ConfigError

__all__ = [
    "PRECISIONS",
    "Precision",
    "autocast",
    "cuda_available",
    "prepare_module",
    "select_device",
    "to_memory_format",
    "use_bf16",
]


def cuda_available() -> bool:
    return torch.cuda.is_available()


def select_device(preference: Literal["auto", "cpu", "cuda"] = "auto") -> torch.device:
    """CUDA when present (or asked for), else CPU. The CUDA device carries its index (the current device, which a
    DDP rank sets to its own), so that it compares equal to ``tensor.device`` (``cuda`` != ``cuda:0`` in torch)."""
    if preference == "cpu":
        return torch.device("cpu")
    if preference == "cuda" and not cuda_available():
        raise ConfigError("train.device is 'cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
    return torch.device("cuda", torch.cuda.current_device()) if cuda_available() else torch.device("cpu")


Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("auto", "fp32", "bf16")


def use_bf16(device: torch.device, precision: Precision = "auto") -> bool:
    """Whether the backbone runs under bf16 autocast (and channels_last): ``auto`` = on CUDA only; ``bf16`` /
    ``fp32`` force it. On a CPU without native bf16 (AVX2; this repository's machine) bf16 autocast measured 5–8×
    slower than fp32 (docs/design.md §7.12), so ``auto`` keeps CPUs in fp32. Losses and the hyperbolic operations
    stay float32 either way (§2.5)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)} (train.precision)")
    if precision == "auto":
        return device.type == "cuda"
    return precision == "bf16"


def autocast(device: torch.device, precision: Precision = "auto") -> contextlib.AbstractContextManager:
    """bf16 autocast where :func:`use_bf16`, else a no-op."""
    if use_bf16(device, precision):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def prepare_module(module: nn.Module, device: torch.device, precision: Precision = "auto") -> nn.Module:
    """Move to ``device``; channels_last where bf16 is used (faster convolutions with bf16)."""
    module = module.to(device)
    if use_bf16(device, precision):
        module = module.to(memory_format=torch.channels_last)
    return module


def to_memory_format(x: torch.Tensor, device: torch.device, precision: Precision = "auto") -> torch.Tensor:
    """Images (B, C, H, W) in channels_last where bf16 is used; unchanged otherwise."""
    if use_bf16(device, precision) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x
