"""``torch.compile`` for the training step (params ``train.compile`` / ``train.compile_mode``).

On a GPU a small model's step is bound by kernel launches, not by the GPU (docs/design.md §7.12): inductor fuses the
backbone's element-wise work (batch norm, activations, residual adds) into fewer kernels, and ``reduce-overhead``
also replays the step's kernels as a CUDA graph. The model's parameters, state dict and checkpoints are unchanged:
the compiled callable wraps the module, the module itself is what is saved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from components.errors import ConfigError

__all__ = ["COMPILE_MODES", "COMPILE_SETTINGS", "Compile", "CompileMode", "compiled", "use_compile"]

Compile = Literal["auto", "off", "on"]
COMPILE_SETTINGS: tuple[Compile, ...] = ("auto", "off", "on")
CompileMode = Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[CompileMode, ...] = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def use_compile(device: torch.device, setting: Compile = "off", distributed: bool = False) -> bool:
    """Whether the training step's forward passes run compiled: ``auto`` = on CUDA in one process (measured faster
    there, docs/design.md §7.12; on a CPU the compile costs more than a generation's training saves, and compiled DDP
    ranks were not measured), ``on`` / ``off`` force it."""
    if setting not in COMPILE_SETTINGS:
        raise ConfigError(
            f"unknown compile setting {setting!r}; use one of {', '.join(COMPILE_SETTINGS)} (train.compile)"
        )
    if setting == "auto":
        return device.type == "cuda" and not distributed
    return setting == "on"


def compiled(
    module: Callable[..., object],
    device: torch.device,
    setting: Compile = "off",
    mode: CompileMode = "default",
    distributed: bool = False,
) -> Callable[..., object]:
    """``module`` compiled by inductor in ``mode`` where :func:`use_compile`, else ``module`` itself.

    Shapes are static (``dynamic=False``): every full batch has one shape, and a short last batch compiles once more.
    """
    if not use_compile(device, setting, distributed):
        return module
    if mode not in COMPILE_MODES:
        raise ConfigError(f"unknown compile mode {mode!r}; use one of {', '.join(COMPILE_MODES)} (train.compile_mode)")
    return torch.compile(module, mode=mode, dynamic=False)
