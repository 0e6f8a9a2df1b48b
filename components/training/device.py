"""Device selection and the GPU fast paths (bf16 autocast, channels_last, pinned memory)."""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from torch import nn

from components.errors import ConfigError

__all__ = ["autocast", "cuda_available", "prepare_module", "select_device", "to_memory_format"]


def cuda_available() -> bool:
    return torch.cuda.is_available()


def select_device(preference: Literal["auto", "cpu", "cuda"] = "auto") -> torch.device:
    """CUDA when present (or asked for), else CPU."""
    if preference == "cpu":
        return torch.device("cpu")
    if preference == "cuda" and not cuda_available():
        raise ConfigError("train.device is 'cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
    return torch.device("cuda") if cuda_available() else torch.device("cpu")


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; a no-op on CPU (CPU bf16 is slower than fp32 on most hosts)."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def prepare_module(module: nn.Module, device: torch.device) -> nn.Module:
    """Move to ``device``; channels_last on CUDA (faster convolutions with bf16)."""
    module = module.to(device)
    if device.type == "cuda":
        module = module.to(memory_format=torch.channels_last)
    return module


def to_memory_format(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Images (B, C, H, W) in channels_last on CUDA; unchanged on CPU."""
    if device.type == "cuda" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x
