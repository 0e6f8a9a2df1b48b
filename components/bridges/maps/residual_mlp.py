"""Residual MLP: y ≈ s·x W_P + b + MLP(x), the Procrustes isometry plus a small two-layer network (Drift-Adapter's
residual MLP map), the network's last layer started at zero so training starts from the isometry. Trained with Adam
on the squared error in the fitting space (torch, CPU, seeded); applied with numpy (GELU, tanh form, in both)."""

from __future__ import annotations

import numpy as np
import torch

from components.bridges.base import BridgeMap, register_map
from components.bridges.maps.procrustes import procrustes
from components.errors import ConfigError

__all__ = ["ResidualMLP"]


def _gelu(h: np.ndarray) -> np.ndarray:
    return 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h**3)))


@register_map("residual_mlp")
class ResidualMLP(BridgeMap):
    """x (N, d_in) → s·x W_P + b + GELU(x A + c) B (N, d_out); ``hidden`` units, ``epochs`` of Adam (``lr``) in
    batches of ``batch``, weight decay ``decay``."""

    def __init__(
        self, hidden: int = 256, epochs: int = 200, lr: float = 1e-3, batch: int = 256, decay: float = 1e-4
    ) -> None:
        if hidden < 1 or epochs < 1 or lr <= 0 or batch < 1 or decay < 0:
            raise ConfigError(
                f"residual_mlp map: hidden {hidden}, epochs {epochs}, batch {batch} must be ≥ 1, lr {lr} > 0 and decay "
                f"{decay} ≥ 0; set upgrade.map_options"
            )
        self.hidden, self.epochs, self.lr, self.batch, self.decay = int(hidden), int(epochs), float(lr), batch, decay
        self.p: dict[str, np.ndarray] = {}

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int = 0) -> ResidualMLP:
        w_p, s = procrustes(x, y)
        gen = torch.Generator().manual_seed(seed)
        xt, yt = torch.from_numpy(x).float(), torch.from_numpy(y).float()
        base = torch.from_numpy(s * w_p).float()
        b = torch.zeros(y.shape[1], requires_grad=True)
        a = torch.empty(x.shape[1], self.hidden)
        torch.nn.init.kaiming_uniform_(a.T, a=5**0.5, generator=gen)  # nn.Linear's init
        a.requires_grad_(True)
        c = torch.zeros(self.hidden, requires_grad=True)
        out = torch.zeros(self.hidden, y.shape[1], requires_grad=True)  # starts at the isometry
        opt = torch.optim.AdamW([a, c, out, b], lr=self.lr, weight_decay=self.decay)
        gelu = torch.nn.GELU(approximate="tanh")
        for _ in range(self.epochs):
            for idx in torch.randperm(len(xt), generator=gen).split(self.batch):
                xb = xt[idx]
                pred = xb @ base + b + gelu(xb @ a + c) @ out
                loss = (pred - yt[idx]).pow(2).sum(1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.p = {
            "base": base.numpy().astype(np.float64),
            "b": b.detach().numpy().astype(np.float64),
            "a": a.detach().numpy().astype(np.float64),
            "c": c.detach().numpy().astype(np.float64),
            "out": out.detach().numpy().astype(np.float64),
        }
        return self

    def apply(self, x: np.ndarray) -> np.ndarray:
        p = self.p
        return x @ p["base"] + p["b"] + _gelu(x @ p["a"] + p["c"]) @ p["out"]

    def arrays(self) -> dict[str, np.ndarray]:
        opts = np.array([self.hidden, self.epochs, self.lr, self.batch, self.decay], dtype=np.float64)
        return {**self.p, "options": opts}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> ResidualMLP:
        h, e, lr, bs, wd = (float(v) for v in arrays["options"])
        m = cls(int(h), int(e), lr, int(bs), wd)
        m.p = {k: np.asarray(arrays[k], dtype=np.float64) for k in ("base", "b", "a", "c", "out")}
        return m
