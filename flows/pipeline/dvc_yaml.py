"""dvc.yaml, generated from params.yaml: one DVC stage per declared generation (docs/design.md §7.15).

DVC's own templating (``foreach``) cannot say what differs between the generations of a chain: generation 0 has no
parent and trains base-only at ζ₀, so neither the alignment nor ζ's growth nor the backfill rules shape it, while
every later generation depends on its predecessor's workspace and on those. So ``dvc.yaml`` is written from
params.yaml by ``bctflow pipeline --write-dvc-yaml`` (a header says so), like prefect.yaml
(flows/pipeline/deployment.py); a
test checks that the committed file is what the generator writes from the committed params.yaml, and every stage
command refuses a ``dvc.yaml`` that is not (:func:`check_dvc_yaml`).

Layout (what each stage writes):

* ``outputs/data/<name>.json`` — the ``data`` stage: every generation's data manifest (DVC cache);
* ``outputs/<name>/workspace`` — stage ``<name>``: a bctflow workspace holding the chain up to that generation,
  started as a copy of the parent stage's (DVC cache);
* ``results/<name>/`` — stage ``<name>``: ``metrics.json``, ``training.csv``, ``compatibility.json`` (kept in Git,
  ``cache: false``, so every commit and experiment carries them: ``dvc exp show``, ``dvc metrics diff``,
  ``dvc plots diff``), and the PNG images ``training.png`` and ``compatibility.png`` (the stage's ``plots:``, also
  ``cache: false``): DVC draws the data plots with Vega-Lite, loaded from a CDN, so offline its page shows only the
  images.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from components.errors import ConfigError
from flows.params import GenerationSpec, Params
from flows.params.keys import generation_keys
from flows.params.tags import sections, select
from flows.pipeline.dvc_stage import PNG_PLOTS

__all__ = [
    "CODE_DEPS",
    "DATA_CODE_DEPS",
    "HEADER",
    "check_dvc_yaml",
    "dvc_yaml",
    "manifest_path",
    "param_keys",
    "results_dir",
    "workspace_dir",
    "write_dvc_yaml",
]

OUTPUTS = "outputs"
RESULTS = "results"
#: the code a generation stage runs (a change re-runs every generation, as the nightly check retrains, design §7.14)
CODE_DEPS = ("components", "flows", "registry", "bctflow")
#: the code the data stage runs: dataset loading, splitting and selecting
DATA_CODE_DEPS = (
    "components/data",
    "flows/generation/chain.py",
    "flows/params/schema.py",
    "flows/pipeline/dvc_yaml.py",
    "flows/gallery/data.py",
    "flows/generation/snapshot.py",
    "bctflow/stages.py",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

HEADER = """\
# GENERATED from params.yaml by `bctflow pipeline --write-dvc-yaml`; do not edit — change params.yaml `generations:`
# and run that command again (tests/flows/pipeline/test_dvc_yaml.py checks that this file is what it writes).
# `dvc repro` reproduces the chain params.yaml declares (docs/design.md §7.15):
#   data      : every generation's data manifest (outputs/data/<name>.json)
#   <name>    : one stage per generation, in its own workspace outputs/<name>/workspace (a copy of its parent's),
#               depending only on what shapes it: the parent's workspace, its manifest, the params it reads, the code;
#               results/<name>/ holds its metrics and plot data (in Git: dvc exp show / metrics diff / plots diff)
#               and its PNG plots (training curves, compatibility heatmap: `dvc plots show` shows them offline)
"""


def workspace_dir(name: str) -> str:
    return f"{OUTPUTS}/{name}/workspace"


def manifest_path(name: str) -> str:
    return f"{OUTPUTS}/data/{name}.json"


def results_dir(name: str) -> str:
    return f"{RESULTS}/{name}"


def param_keys(params: Params, index: int) -> list[str]:
    """The params.yaml keys generation ``index`` of the chain depends on (:func:`flows.params.keys.generation_keys`:
    those whose tag says they shape it, the alignment's by method) and ``generations.<index>``: its entry."""
    spec = params.declared_chain()[index]
    method, named = spec.alignment or params.alignment.method, spec.alignment is not None
    keys = generation_keys(params, aligned=index > 0, method=method, named=named, run_options=False)
    return [*keys, f"generations.{index}"]


def _missing(raw: dict[str, Any], keys: list[str]) -> list[str]:
    def present(key: str) -> bool:
        node: Any = raw
        for part in key.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return False
        return True

    return [k for k in keys if not present(k)]


def _check_names(chain: list[GenerationSpec]) -> None:
    for spec in chain:
        name = str(spec.name)
        if not _NAME.match(name) or name == "data":
            raise ConfigError(
                f"generation name {name!r} cannot name a DVC stage and its folders; use letters, digits, _ and - "
                "(not starting with _ or -, and not 'data'), e.g. g0, g1"
            )


def _generation_stage(params: Params, raw: dict[str, Any], index: int) -> dict[str, Any]:
    chain = params.declared_chain()
    name = str(chain[index].name)
    keys = param_keys(params, index)
    missing = _missing(raw, keys)
    if missing:
        defaults = {k: _default(params, k) for k in missing}
        raise ConfigError(
            f"params.yaml lacks {', '.join(f'{k} (default {v!r})' for k, v in defaults.items())}: DVC tracks each "
            f"parameter stage {name} depends on by its key, so params.yaml must spell it out; add "
            f"{'them' if len(missing) > 1 else 'it'} with the value you want"
        )
    parent = str(chain[index - 1].name) if index else None
    res = results_dir(name)
    deps = [manifest_path(name), *CODE_DEPS]
    cmd = [f"bctflow stage generation {name}"]
    if parent is not None:
        cmd.append(f"--parent {workspace_dir(parent)}")
        deps.insert(0, workspace_dir(parent))
    cmd.append(f"--manifest {manifest_path(name)} --home {workspace_dir(name)} --results {res}")
    return {
        "cmd": " ".join(cmd),
        "deps": deps,
        "params": keys,
        "outs": [
            workspace_dir(name),
            {f"{res}/training.csv": {"cache": False}},
            {f"{res}/compatibility.json": {"cache": False}},
        ],
        "metrics": [{f"{res}/metrics.json": {"cache": False}}],
        "plots": [{f"{res}/{png}": {"cache": False}} for png in PNG_PLOTS],
    }


def _default(params: Params, key: str) -> Any:
    node: Any = params.as_dict()
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
    return node


def _data_stage(params: Params, raw: dict[str, Any]) -> dict[str, Any]:
    keys = select(sections(Params)["data"], "data", lambda t: t.data_stage)
    missing = _missing(raw, keys)
    if missing:
        raise ConfigError(
            f"params.yaml lacks {', '.join(missing)}: DVC tracks each parameter the data stage depends on by its key, "
            "so params.yaml must spell it out; add it with the value you want"
        )
    return {
        "cmd": f"bctflow stage data --out {OUTPUTS}/data",
        "deps": list(DATA_CODE_DEPS),
        "params": [*keys, "generations"],
        "outs": [f"{OUTPUTS}/data"],
    }


def _plots(chain: list[GenerationSpec]) -> list[dict[str, Any]]:
    names = [str(s.name) for s in chain]
    curves = [
        (
            f"training {label}",
            {"x": "epoch", "y": {f"{results_dir(n)}/training.csv": column for n in names}, "y_label": label},
        )
        for column, label in (("loss", "loss"), ("train_accuracy", "accuracy"))
    ]
    heatmap = {
        "template": "compatibility",
        "x": "gallery",
        "y": {f"{results_dir(names[-1])}/compatibility.json": "query"},
        "title": f"compatibility as of {names[-1]}: queries embedded by row, gallery by column",
        "x_label": "gallery embedded by",
        "y_label": "queries embedded by",
    }
    return [*({title: spec} for title, spec in curves), {"compatibility": heatmap}]


def dvc_yaml(params: Params, raw: dict[str, Any]) -> str:
    """The text of dvc.yaml for ``params`` (``raw``: the params.yaml mapping it was parsed from: DVC reads that
    file, so every key a stage names must be written in it)."""
    chain = params.declared_chain()
    _check_names(chain)
    if params.lineage.db_url is not None or params.tracking.mlflow_uri is not None:
        raise ConfigError(
            "the DVC pipeline keeps each generation's lineage and MLflow store in its own workspace (a DVC output), "
            "so params.yaml lineage.db_url and tracking.mlflow_uri must be null; unset them for `dvc repro`"
        )
    stages = {"data": _data_stage(params, raw)}
    for i, spec in enumerate(chain):
        stages[str(spec.name)] = _generation_stage(params, raw, i)
    doc = {"stages": stages, "plots": _plots(chain)}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def _read(params_path: Path) -> tuple[Params, dict[str, Any]]:
    from flows.params import load_params

    params = load_params(params_path)
    return params, yaml.safe_load(params_path.read_text()) or {}


def write_dvc_yaml(path: Path, params_path: Path) -> str:
    """Write :func:`dvc_yaml` of ``params_path`` to ``path`` (atomically); the text written."""
    from components.io import atomic_write_text

    text = dvc_yaml(*_read(params_path))
    atomic_write_text(path, text)
    return text


def check_dvc_yaml(path: Path, params_path: Path) -> None:
    """ConfigError unless ``path`` is what params.yaml generates (a stage of an out-of-date dvc.yaml would run a chain
    params.yaml no longer declares, or miss a parameter)."""
    expected = dvc_yaml(*_read(params_path))
    if not path.exists() or path.read_text() != expected:
        raise ConfigError(
            f"{path} is not what {params_path} generates (its `generations:` or keys changed since it was written); "
            "run `bctflow pipeline --write-dvc-yaml`, then `dvc repro` again"
        )
