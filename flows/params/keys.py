"""The params.yaml keys a generation depends on: those its DVC stage tracks (flows/pipeline/dvc_yaml.py) and those its
MLflow
run records as its params (flows/generation/mlflow_run.py), from one rule.

Each key's tag says what it shapes (flows/params/tags.py): a generation depends on the keys whose tag says they shape
it — generation 0 not on those of an aligned generation only (it trains with the base loss only, at ζ₀, with no φ*
and no backfill decision) — and, of the alignment section, on what its method reads: the method itself unless the
generation's entry names another, λ, and that method's options (``independent`` reads none). The run options
(where and how a run goes, shaping nothing) are left to the caller: an MLflow run records them, a DVC stage does not
track them. A node is named whole when every key under it is included (``model``, ``data.augment``).
"""

from __future__ import annotations

from flows.params import Params
from flows.params.tags import Shapes, sections, select

__all__ = ["alignment_keys", "generation_keys"]


def alignment_keys(params: Params, method: str, named: bool) -> list[str]:
    """The alignment entries an aligned generation training with ``method`` reads: ``alignment.method`` unless its
    entry names the method (``named``: the entry's ``alignment:`` wins), λ and the method's options."""
    if method == "independent":
        return []
    keys = [] if named else ["alignment.method"]
    keys.append("alignment.weight")
    if method in params.alignment.options:
        keys.append(f"alignment.options.{method}")
    return keys


def generation_keys(params: Params, *, aligned: bool, method: str, named: bool, run_options: bool) -> list[str]:
    """The dotted keys a generation depends on (``aligned``: it has a parent; ``method``, ``named``: as for
    :func:`alignment_keys`), with the run options too when ``run_options``; in declaration order."""

    def keep(tag: Shapes) -> bool:
        return tag.shapes_generation(aligned) or (run_options and tag.generations == "none")

    keys: list[str] = []
    for name, section in sections(Params).items():
        if name == "alignment":
            keys.extend(alignment_keys(params, method, named) if aligned else [])
        else:
            keys.extend(select(section, name, keep))
    return keys
