"""Small builders shared by tests."""

from __future__ import annotations

from components.models import ModelSpec


def tiny_spec(**kw) -> ModelSpec:
    """A narrow ResNet-18 on 8×8 grey images: real timm code, milliseconds per batch."""
    base = dict(
        backbone="resnet18",
        backbone_kwargs={"channels": [8, 8, 16, 16]},
        embed_dim=16,
        geometry="lorentz",
        num_classes=10,
        class_order=tuple(range(10)),
        in_chans=1,
        image_size=8,
        small_stem=True,
    )
    base.update(kw)
    return ModelSpec(**base)


def run_generation(home, params_path, spec: dict | None = None, overrides: list[str] | None = None) -> dict:
    """One generation through the real flow, as the CLI runs it: parse params once, plan once, run."""
    from flows.new_generation import new_generation
    from flows.params import GenerationSpec, load_params
    from flows.steps.preflight import plan_generation

    params = load_params(params_path, overrides)
    return new_generation(plan_generation(params, home, GenerationSpec(**spec) if spec else None))


def run_backfill(home, params_path, overrides: list[str] | None = None, **request) -> dict:
    """One backfill through the real flow (``request``: target, fraction, order, seed, force)."""
    from flows.backfill import backfill
    from flows.params import load_params
    from flows.steps.reembed import plan_backfill
    from flows.workspace import Workspace

    return backfill(plan_backfill(load_params(params_path, overrides), Workspace(home), **request))
