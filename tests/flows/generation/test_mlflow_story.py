"""What the MLflow UI shows of a lineage made by the real flow (real Prefect, SQLite MLflow, DVC, FAISS): each
generation's run opened before it trained (its duration covers the training, system metrics), its dataset inputs
(digest = the DVC md5), every params.yaml key and the file, the reference φ* as a child run, the Prefect flow run and
git commit as tags, the lineage picture, the registered model's description; and the flow run's artifact linking
back. Then the production model loads and embeds in a process that cannot import bctflow, timm or the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mlflow
import numpy as np
import pytest
import yaml

from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.gallery.data import load_splits
from flows.params import load_params
from flows.recovery.model_text import LINEAGE_ARTIFACT
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.tracking.common import param_values
from tests.helpers import run_generation, write_params

MODEL = "bctflow-embedder"


@pytest.fixture(scope="module")
def story(prefect_harness, tmp_path_factory):
    """g0, then g1 (HBCT, with its reference φ*), through the real flow reporting to the harness's Prefect server
    named by PREFECT_API_URL (so the flow run has a UI URL); system metrics sampled every second."""
    from prefect.settings import PREFECT_API_URL

    tmp = tmp_path_factory.mktemp("story")
    params = tmp / "params.yaml"
    write_params(params, ["alignment.method=hbct", "alignment.weight=0.3"])  # the paper's method, as the lineage's
    home = tmp / "ws"
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")}
    os.environ.update(PREFECT_API_URL=PREFECT_API_URL.value(), MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="1")
    try:
        s0 = run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
        s1 = run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": True})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    uri = f"sqlite:///{home / 'mlflow.db'}"
    return home, params, s0, s1, mlflow.MlflowClient(uri, uri)


def _generation(home: Path, gid: int) -> dict:
    with LineageDB(f"sqlite:///{home / 'lineage.db'}") as store:
        return store.to_json()[gid]


def test_the_run_opens_before_training_and_ends_after_the_commit(story):
    home, _, _, s1, client = story
    g1 = _generation(home, 1)
    run = client.get_run(g1["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    seconds = (run.info.end_time - run.info.start_time) / 1000
    assert seconds > run.data.metrics["train_seconds"] > 0  # the run covers the training (and more)
    system = [k for k in run.data.metrics if k.startswith("system/")]
    assert "system/cpu_utilization_percentage" in system and "system/system_memory_usage_megabytes" in system
    epochs = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in epochs] == [1]  # each epoch once (train.epochs=1), at step = epoch
    assert s1["mlflow_run_id"] == run.info.run_id


def test_every_param_and_params_yaml_are_logged(story, tmp_path: Path):
    home, params_file, _, _, client = story
    g1 = _generation(home, 1)
    run = client.get_run(g1["mlflow_run_id"])
    p = load_params(params_file)
    for key, value in param_values(p.as_dict()).items():  # every key of params.yaml, flattened
        if key.startswith("alignment.options.") and not key.startswith("alignment.options.hbct."):
            assert key not in run.data.params, key  # another method's options shape no HBCT generation
            continue
        assert run.data.params[key] == value, key
    assert run.data.params["generation.alignment"] == "hbct" and run.data.params["generation.parent"] == "0"
    assert run.data.params["generation.zeta"] == "1.2"
    logged = client.download_artifacts(run.info.run_id, "params/params.yaml", str(tmp_path))
    assert yaml.safe_load(Path(logged).read_text()) == p.as_dict()


def test_generation_0_records_the_method_it_trained_with_not_the_alignment_it_did_not_use(story):
    """params.yaml says `alignment.method: hbct`; generation 0 trains with the base loss only, so its run records
    `generation.alignment: independent` and none of the keys that shape an aligned generation only."""
    home, params_file, _, _, client = story
    assert load_params(params_file).alignment.method == "hbct"
    run = client.get_run(_generation(home, 0)["mlflow_run_id"])
    params = run.data.params
    assert params["generation.alignment"] == "independent" and params["generation.parent"] == "null"
    assert not [k for k in params if k.startswith(("alignment.", "backfill.rules."))]
    assert "geometry.delta_zeta" not in params and "evaluation.reference" not in params
    assert params["geometry.zeta0"] == "1.0" and params["train.epochs"] == "1"  # what does shape it
    assert params["train.device"] == "auto" and params["backfill.chunk_size"] == "256"  # how it ran
    assert "base loss only (`independent`" in run.data.tags["mlflow.note.content"]


def test_the_datasets_are_inputs_with_the_dvc_md5_as_digest(story):
    home, _, _, _, client = story
    g1 = _generation(home, 1)
    run = client.get_run(g1["mlflow_run_id"])
    inputs = {
        next(t.value for t in d.tags if t.key == "mlflow.data.context"): d.dataset for d in run.inputs.dataset_inputs
    }
    assert set(inputs) == {"training", "evaluation"}
    train = inputs["training"]
    assert train.digest == g1["data_hash"]  # the DVC md5 of the generation's manifest
    dvc = yaml.safe_load((Workspace(home).data_dir / "snapshots" / "gen_001" / "manifest.json.dvc").read_text())
    assert train.digest == dvc["outs"][0]["md5"]
    assert json.loads(train.source)["uri"] == str(Workspace(home).data_dir / "snapshots" / "gen_001" / "manifest.json")
    assert str(json.loads(train.profile)["num_rows"]) == run.data.params["data_snapshot.n_train"] != "0"
    features = json.loads(json.loads(train.schema)["mlflow_tensorspec"]["features"])
    assert features[0]["tensor-spec"] == {"dtype": "uint8", "shape": [-1, 8, 8, 1]}
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "data")}
    assert arts == {"data/manifest.json", "data/manifest.json.dvc"}


def test_the_reference_is_a_child_run(story):
    home, _, _, _, client = story
    g1 = _generation(home, 1)
    parent = g1["mlflow_run_id"]
    exp = client.get_run(parent).info.experiment_id
    children = client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert len(children) == 1
    child = children[0]
    assert child.info.status == "FINISHED" and child.data.tags["bctflow.role"] == "reference"
    assert child.data.params["alignment"] == "independent"
    assert [m.step for m in client.get_metric_history(child.info.run_id, "train/loss")] == [1]
    ref = g1["metrics"]["reference"]
    assert child.data.metrics["self/map"] == pytest.approx(ref["self"]["map"])
    assert child.data.metrics["cross/map"] == pytest.approx(ref["cross"]["map"])


def test_the_run_and_the_flow_run_link_to_each_other(story):
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL

    home, _, _, s1, client = story
    run = client.get_run(_generation(home, 1)["mlflow_run_id"])
    tags = run.data.tags
    flow_run_id = tags["prefect.flow_run_id"]
    ui = PREFECT_API_URL.value().removesuffix("/api")
    assert tags["prefect.flow_run_url"] == f"{ui}/runs/flow-run/{flow_run_id}"  # as Prefect's "View at" names it
    assert f"({tags['prefect.flow_run_url']})" in tags["mlflow.note.content"]  # the run description links it
    assert len(tags["mlflow.source.git.commit"]) == 40 and tags["bctflow.git_dirty"] in ("true", "false")
    with get_client(sync_client=True) as prefect:
        flow_run = prefect.read_flow_run(flow_run_id)
        artifacts = prefect.read_artifacts()
    assert flow_run.name == tags["prefect.flow_run_name"]
    markdown = next(a for a in artifacts if a.key == "generation-1" and str(a.flow_run_id) == flow_run_id)
    url = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    assert f"[{run.info.run_id}]({url})" in markdown.data and s1["mlflow_run_url"] == url


def test_the_lineage_picture_is_on_every_run_and_in_the_model_description(story, tmp_path: Path):
    home, _, _, _, client = story
    for gid in (0, 1):
        run_id = _generation(home, gid)["mlflow_run_id"]
        png = Path(client.download_artifacts(run_id, LINEAGE_ARTIFACT, str(tmp_path / str(gid))))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    newest = _generation(home, 1)["mlflow_run_id"]
    description = client.get_registered_model(MODEL).description
    assert f"get-artifact?path=lineage%2Flineage.png&run_uuid={newest}" in description
    # each version's description leads with its generation's state (what MLflow's versions table shows) and ends
    # with the picture its own run holds
    with LineageDB(f"sqlite:///{home / 'lineage.db'}", readonly=True) as store:
        timeline = store.timeline()
    for g in timeline.generations:
        described = client.get_model_version(MODEL, g.version).description.split("\n\n")
        assert described[0] == timeline.state(g.gen_id)
        run_id = _generation(home, g.gen_id)["mlflow_run_id"]
        assert described[-1].endswith(f"(get-artifact?path=lineage%2Flineage.png&run_uuid={run_id})")
    tags = client.get_model_version(MODEL, "2").tags
    assert list(tags)[:4] == [
        "bctflow.generation",
        "bctflow.zeta",
        "bctflow.compatible_with_live_gallery",
        "bctflow.backfill_required",
    ]


_LOAD_WITHOUT_THE_PROJECT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    REFUSED = {"components", "flows", "registry", "bctflow", "benchmarks", "tests", "timm"}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in REFUSED:
                raise ModuleNotFoundError(f"{name} is not importable here")
            return None

    sys.meta_path.insert(0, Refuse())
    import mlflow, numpy as np

    uri, images, out = sys.argv[1:4]
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/bctflow-embedder@production")
    np.save(out, model.predict(np.load(images)))
    loaded = sorted({m.split(".")[0] for m in sys.modules} & REFUSED)
    print(json.dumps({"project_modules": loaded}))
    """
)


def test_the_production_model_embeds_without_the_project(story, tmp_path: Path):
    """In a child process whose imports cannot reach bctflow's packages, timm or the repository (empty working
    folder, no PYTHONPATH, a finder that refuses them), the production model embeds the gallery's images into the
    very vectors the live FAISS index holds."""
    home, params_file, _, _, _ = story
    p = load_params(params_file)
    store = LineageDB(f"sqlite:///{home / 'lineage.db'}")
    prod_id = store.production_generation_id()
    store.close()
    prod = _generation(home, prod_id)
    test = load_splits(p, Workspace(home)).test
    images = test.decode().images[:64]
    np.save(tmp_path / "images.npy", images)
    script = tmp_path / "load.py"
    script.write_text(_LOAD_WITHOUT_THE_PROJECT)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", str(script), f"sqlite:///{home / 'mlflow.db'}", str(tmp_path / "images.npy"), "o.npy"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"project_modules": []}
    vectors = np.load(empty / "o.npy")
    gallery = GalleryParts(GalleryVersion.of_index(prod["index"]).evaluation_gallery()).embeddings()
    row = {int(i): n for n, i in enumerate(gallery.ids)}
    expected = gallery.vectors()[[row[int(i)] for i in test.ids[:64]]]
    assert vectors.shape == expected.shape and vectors.dtype == np.float32
    assert np.abs(vectors - expected).max() < 1e-4 * max(1.0, np.abs(expected).max())
