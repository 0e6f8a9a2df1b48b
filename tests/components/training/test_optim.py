"""The optimiser (timm's factory) and the per-step lr schedule (components/training/optim.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from components.training.optim import build_optimizer, build_scheduler


def _net() -> nn.Module:
    """Weights, biases, BatchNorm affine parameters and one frozen parameter."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    net[3].bias.requires_grad_(False)
    return net


def _trainable(net: nn.Module) -> list[nn.Parameter]:
    return [p for p in net.parameters() if p.requires_grad]


@pytest.mark.parametrize(
    ("name", "momentum", "cls", "settings"),
    [
        ("sgd", 0.9, torch.optim.SGD, {"momentum": 0.9, "nesterov": True, "dampening": 0}),
        ("sgd", 0.0, torch.optim.SGD, {"momentum": 0.0, "nesterov": False}),
        ("adamw", 0.9, torch.optim.AdamW, {"betas": (0.9, 0.999), "eps": 1e-8, "amsgrad": False}),
    ],
)
def test_timm_builds_torchs_optimizer_with_one_group_and_decay_on_every_parameter(name, momentum, cls, settings):
    net = _net()
    opt = build_optimizer(net.parameters(), name, 0.05, momentum, 5e-4)
    assert type(opt) is cls and len(opt.param_groups) == 1  # no bias / norm-weight group without decay
    group = opt.param_groups[0]
    assert [id(p) for p in group["params"]] == [id(p) for p in _trainable(net)]  # the frozen bias is left out
    assert group["lr"] == 0.05 and group["weight_decay"] == 5e-4
    assert {k: group[k] for k in settings} == settings


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'; use sgd or adamw"):
        build_optimizer(_net().parameters(), "lamb", 0.05, 0.9, 0.0)


@pytest.mark.parametrize(("name", "momentum"), [("sgd", 0.9), ("sgd", 0.0), ("adamw", 0.9)])
def test_steps_are_bit_identical_to_the_hand_built_torch_optimizer(name, momentum):
    """What the optimiser was before timm built it: same class, same arguments, so seeded runs do not change."""
    a, b = _net(), _net()
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    opt_a = build_optimizer(a.parameters(), name, 0.05, momentum, 5e-4)
    if name == "sgd":
        opt_b = torch.optim.SGD(_trainable(b), lr=0.05, momentum=momentum, weight_decay=5e-4, nesterov=momentum > 0)
    else:
        opt_b = torch.optim.AdamW(_trainable(b), lr=0.05, weight_decay=5e-4)
    sched_a, sched_b = (build_scheduler(o, 6, 2, "cosine") for o in (opt_a, opt_b))
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        for net, opt, sched in ((a, opt_a, sched_a), (b, opt_b, sched_b)):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            sched.step()
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(va, vb), k


def _lrs(total: int, warmup: int, schedule: str, base: float = 0.1) -> list[float]:
    """The lr each of the ``total`` updates uses, then the one left after the last update."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base)
    sched = build_scheduler(opt, total, warmup, schedule)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return [*out, opt.param_groups[0]["lr"]]


def test_lr_per_step_is_linear_warm_up_then_cosine_or_constant():
    base, total, warmup = 0.1, 12, 3
    warm = [base * ((s + 1) / warmup) for s in range(warmup)]  # 1/3, 2/3, 1 of the base lr
    cosine = [
        base * (0.5 * (1.0 + math.cos(math.pi * ((s - warmup) / (total - warmup))))) for s in range(warmup, total)
    ]
    assert _lrs(total, warmup, "cosine", base) == [*warm, *cosine, 0.0]
    assert _lrs(total, warmup, "cosine", base)[warmup - 1 : warmup + 1] == [base, base]  # the base lr, twice
    assert _lrs(total, warmup, "constant", base) == [*warm, *[base] * (total - warmup), base]
    assert _lrs(8, 0, "cosine", base) == [base * (0.5 * (1.0 + math.cos(math.pi * (s / 8)))) for s in range(9)]
    assert _lrs(4, 0, "constant", base) == [base] * 5
    assert _lrs(3, 5, "cosine", base) == [base * ((s + 1) / 5) for s in range(4)]  # a warm-up longer than the run


def test_schedule_resumes_from_its_state_dict():
    """The checkpoint path: optimiser and scheduler state saved mid-run, loaded into fresh ones, continue the run."""
    full = _lrs(10, 2, "cosine")
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = build_scheduler(opt, 10, 2, "cosine")
    for _ in range(4):
        opt.step()
        sched.step()
    saved = copy.deepcopy({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()})
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = build_scheduler(opt, 10, 2, "cosine")
    opt.load_state_dict(saved["optimizer"])
    sched.load_state_dict(saved["scheduler"])
    rest = []
    for _ in range(6):
        rest.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rest == full[4:10]
