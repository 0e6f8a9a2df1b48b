"""Inputs that need the data, the model or the disk (flows/planning/checks.py) are refused while the run is planned:
before training, before any Prefect server starts, with one line, and nothing is written in the workspace."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch
from torch import nn

from components.errors import CheckpointMismatchError, ConfigError, DataError, LineageError
from components.training.device import cuda_available
from flows.params import GenerationSpec, load_params
from flows.planning import checks, make_plan
from flows.planning.checks import DiskEstimate, disk_estimate


def _plan(params_file: Path, home: Path, overrides: list[str] = (), **spec):
    spec.setdefault("name", "g0")
    return make_plan(load_params(params_file, list(overrides)), home, GenerationSpec(**spec))


def _refused(params_file: Path, home: Path, error: type[Exception], words: list[str], overrides=(), **spec) -> str:
    with pytest.raises(error) as info:
        _plan(params_file, home, overrides, **spec)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert "\n" not in msg  # one line
    assert not home.exists() or sorted(p.name for p in home.iterdir()) in ([], ["datasets"])  # nothing of a run
    return msg


@pytest.mark.parametrize(
    ("spec", "error", "words"),
    [
        ({"classes": [0, 10]}, DataError, ["classes [10] do not exist", "fix `classes:`"]),
        ({"classes": [1, 2, 1]}, DataError, ["lists a class twice"]),
        ({"classes": [0, 1], "fraction": 1e-6}, DataError, ["keeps nothing", "raise the fraction"]),
    ],
)
def test_a_bad_data_selection_is_refused_while_planning(tiny_params_file, tmp_path, spec, error, words):
    _refused(tiny_params_file, tmp_path / "ws", error, words, **spec)


@pytest.mark.parametrize(
    ("overrides", "error", "words"),
    [
        (["model.backbone=no_such_net"], ConfigError, ["unknown timm backbone 'no_such_net'"]),
        (["model.backbone_kwargs={no_such_kwarg: 1}"], ConfigError, ["rejected model.backbone_kwargs"]),
        (  # builds, but its forward pass fails (one width for a four-stage ResNet)
            ["model.backbone_kwargs={channels: [8]}"],
            ConfigError,
            ["timm backbone 'resnet18'", "model.backbone_kwargs {'channels': [8]}", "change or remove channels"],
        ),
        (  # its constructor fails with another exception than TypeError
            ["model.backbone_kwargs={layers: [1]}"],
            ConfigError,
            ["timm backbone 'resnet18' rejected model.backbone_kwargs {'layers': [1]}", "ZeroDivisionError"],
        ),
        (
            ["model.backbone=mobilenetv3_small_050", "model.backbone_kwargs={}", "model.small_stem=true"],
            ConfigError,
            ["small_stem is only supported for ResNet-style timm backbones"],
        ),
        (["model.pretrained_path=/nowhere/weights.pt"], ConfigError, ["pretrained weights file", "does not exist"]),
        (["index.type=ivf", "index.nlist=5000"], ConfigError, ["'nlist' is 5000 but only"]),
        (["index.type=ivfpq", "index.pq_m=4", "index.pq_nbits=4"], ConfigError, ["'pq_m' is 4", "width 17"]),
        (["data.max_test_per_class=1"], DataError, ["fewer than 2 images of class(es) 0, 1", "leave-one-out"]),
    ],
)
def test_bad_model_index_and_evaluation_settings_are_refused_while_planning(
    tiny_params_file, tmp_path, overrides, error, words
):
    _refused(tiny_params_file, tmp_path / "ws", error, words, overrides, classes="all")


def test_pretrained_weights_of_another_architecture_are_refused_while_planning(tiny_params_file, tmp_path):
    foreign = tmp_path / "foreign.pt"
    torch.save(nn.Linear(3, 5).state_dict(), foreign)
    _refused(
        tiny_params_file,
        tmp_path / "ws",
        CheckpointMismatchError,
        ["no tensor in", "fits backbone"],
        [f"model.pretrained_path={foreign}"],
    )
    wider = tmp_path / "wider.pt"  # the same architecture at other widths: every name fits, no shape does
    torch.save(timm.create_model("resnet18", num_classes=0, in_chans=1, channels=[16, 16, 32, 32]).state_dict(), wider)
    _refused(
        tiny_params_file,
        tmp_path / "ws",
        CheckpointMismatchError,
        [f"pretrained weights {wider} do not fit backbone ResNet", "layer1.0.conv1.weight (file (16, 64, 3, 3)"],
        [f"model.pretrained_path={wider}"],
    )


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is visible")
def test_a_missing_cuda_device_is_refused_while_planning(tiny_params_file, tmp_path):
    _refused(tiny_params_file, tmp_path / "ws", ConfigError, ["no CUDA device is visible"], ["train.device=cuda"])


def test_a_workspace_that_is_a_file_is_refused(tiny_params_file, tmp_path):
    home = tmp_path / "ws"
    home.write_text("not a folder")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        _plan(tiny_params_file, home)
    below = tmp_path / "ws" / "inner"
    with pytest.raises(ConfigError, match="cannot be created: .* is a file"):
        checks.check_workspace_writable(below)


def test_a_damaged_or_unreachable_tracking_store_is_refused(tiny_params_file, tmp_path):
    garbage = tmp_path / "mlflow.db"
    garbage.write_bytes(b"this is not a database" * 10)
    _refused(
        tiny_params_file,
        tmp_path / "ws",
        ConfigError,
        ["is not a SQLite database"],
        [f"tracking.mlflow_uri=sqlite:///{garbage}"],
    )
    _refused(
        tiny_params_file,
        tmp_path / "ws",
        ConfigError,
        ["cannot reach the MLflow tracking store postgresql+psycopg://nobody:***@", "fix tracking.mlflow_uri"],
        ["tracking.mlflow_uri=postgresql+psycopg://nobody:secret@127.0.0.1:1/mlflow"],
    )


def test_a_full_disk_is_refused_with_the_estimate(tiny_params_file, tmp_path, monkeypatch):
    # a disk cannot be filled here: the free space is what the operating system would report for a full one
    monkeypatch.setattr(
        shutil, "disk_usage", lambda _path: SimpleNamespace(total=10**9, used=10**9 - 2**20, free=2**20)
    )
    msg = _refused(tiny_params_file, tmp_path / "ws", ConfigError, ["needs about", "but its disk has 1 MB"])
    assert "lower train.keep_checkpoints, or choose another --home" in msg


def test_the_disk_estimate_counts_checkpoints_and_galleries(tiny_params_file, tmp_path):
    plan = _plan(tiny_params_file, tmp_path / "ws")
    keep = plan.params.train.keep_checkpoints
    est = disk_estimate(plan.params, len(plan.roles), n_params=1000, width=17, n_gallery=100, n_corpus=50)
    assert est == DiskEstimate(checkpoints=4 * 1000 * (3 * keep + 2), galleries=4 * 17 * (100 * 3 + 2 * 50))
    assert est.total == est.checkpoints + est.galleries


def test_a_damaged_or_unreachable_lineage_database_is_refused(tiny_params_file, tmp_path):
    home = tmp_path / "ws"
    home.mkdir()
    (home / "lineage.db").write_bytes(b"this is not a database" * 10)
    with pytest.raises(LineageError, match=r"cannot read lineage database .*restore a damaged file from a backup"):
        _plan(tiny_params_file, home)
    url = "postgresql+psycopg://nobody:secret@127.0.0.1:1/lineage"
    with pytest.raises(LineageError) as info:
        _plan(tiny_params_file, tmp_path / "other", [f"lineage.db_url={url}"])
    msg = str(info.value)
    assert "cannot read lineage database postgresql+psycopg://nobody:***@127.0.0.1:1/lineage" in msg
    assert "secret" not in msg and "\n" not in msg


def test_an_unknown_uninstalled_or_unreachable_gallery_store_is_refused_while_planning(
    tiny_params_file, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    _refused(tiny_params_file, ws, ConfigError, ["unknown gallery store 'qdrant'", "faiss", "set params gallery.store"],
             ["gallery.store=qdrant"])  # fmt: skip
    _refused(tiny_params_file, ws, ConfigError, ["gallery.store milvus needs gallery.uri"], ["gallery.store=milvus"])
    _refused(tiny_params_file, ws, ConfigError, ["the Milvus at gallery.uri http://127.0.0.1:9 does not answer",
             "start it or fix gallery.uri"], ["gallery.store=milvus", "gallery.uri=http://127.0.0.1:9"])  # fmt: skip
    monkeypatch.setitem(sys.modules, "pymilvus", None)  # as if not installed: importing it fails
    _refused(tiny_params_file, ws, ConfigError, ["gallery.store milvus needs the pymilvus package: pip install"],
             ["gallery.store=milvus", "gallery.uri=milvus.db"])  # fmt: skip
