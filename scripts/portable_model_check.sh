#!/usr/bin/env bash
# Load a bctflow workspace's production model in a fresh virtual environment that holds only mlflow, torch and timm
# (no bctflow, no repository on the path) and embed images with it; compare with the vectors the live gallery holds.
# docs/design.md §7.16; README "The registered model outside bctflow".
#
#   scripts/portable_model_check.sh WORKSPACE [VENV_DIR]
#
# WORKSPACE: a bctflow home with the default stores (mlflow.db, lineage.db), e.g. .bctflow after `bctflow demo`.
# VENV_DIR: where the fresh environment goes (default: a new temporary folder; reused if it already has mlflow).
# BCTFLOW_PYTHON: the Python of bctflow's environment, used only to write the images and the expected vectors
# (default .venv/bin/python). The versions installed are the ones the model's requirements.txt pins.
set -euo pipefail

home=$(cd "${1:?usage: $0 WORKSPACE [VENV_DIR]}" && pwd)
venv=${2:-$(mktemp -d)/venv}
bctflow_python=${BCTFLOW_PYTHON:-.venv/bin/python}
work=$(mktemp -d)

# 1. bctflow's side: 64 evaluation images, the vectors the live gallery holds for them, the model's requirements
"$bctflow_python" - "$home" "$work" <<'EOF'
import shutil, sys
from pathlib import Path

import mlflow
import numpy as np

from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.gallery.data import load_splits
from flows.params import load_params
from flows.runtime.workspace import Workspace

home, work = Path(sys.argv[1]), Path(sys.argv[2])
ws = Workspace(home)
params = load_params(sorted(ws.generations_dir.glob("gen_*/params.yaml"))[-1])  # as the newest generation ran
store = ws.lineage(params, readonly=True)
prod = store.generation(store.production_generation_id())
test = load_splits(params, ws).test.subset(np.arange(64)).decode()
gallery = GalleryParts(GalleryVersion.of_index(prod.index_path).evaluation_gallery()).embeddings()
row = {int(i): n for n, i in enumerate(gallery.ids)}
np.save(work / "images.npy", test.images)
np.save(work / "expected.npy", gallery.vectors()[[row[int(i)] for i in test.ids[:64]]])
mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
name = params.tracking.registered_model
(work / "name").write_text(name)
model = mlflow.artifacts.download_artifacts(f"models:/{name}@production", dst_path=str(work / "model"))
shutil.copy(Path(model) / "requirements.txt", work / "requirements.txt")
print(f"production = generation {prod.id} (version {prod.mlflow_version}); requirements:",
      " ".join((work / "requirements.txt").read_text().split()))
EOF

# 2. a fresh environment with only mlflow, torch (the model's pins) and timm
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import mlflow" 2>/dev/null; then
    python3 -m venv "$venv"
    start=$(date +%s)
    "$venv/bin/pip" install -q --disable-pip-version-check $(grep -E '^(mlflow|torch)==' "$work/requirements.txt") timm
    echo "installed mlflow, torch, timm in $venv in $(( $(date +%s) - start )) s"
fi

# 3. load and embed there, from an empty folder, with the project's packages refused by an import hook
cd "$work" && mkdir -p empty && cd empty
env -u PYTHONPATH "$venv/bin/python" -I - "$home" "$work" <<'EOF'
import importlib.abc, importlib.util, sys, time

PROJECT = ("components", "flows", "registry", "bctflow", "benchmarks", "tests")
print("project packages this environment can import:", [m for m in PROJECT if importlib.util.find_spec(m)] or "none")


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in PROJECT:  # belt and braces: nothing of the project may load
            raise ModuleNotFoundError(f"{name} is not importable here")
        return None

sys.meta_path.insert(0, Refuse())
import mlflow, numpy as np, torch

home, work = sys.argv[1], sys.argv[2]
mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
t = time.time()
name = open(f"{work}/name").read()
model = mlflow.pyfunc.load_model(f"models:/{name}@production", model_config={"device": "cpu"})
vectors = model.predict(np.load(f"{work}/images.npy"))
expected = np.load(f"{work}/expected.npy")
err = float(np.abs(vectors - expected).max())
print(f"mlflow {mlflow.__version__}, torch {torch.__version__}: embedded {vectors.shape} {vectors.dtype} "
      f"in {time.time() - t:.1f} s; max |Δ| vs the live gallery's vectors {err:.2e}")
print("timm imported:", "timm" in sys.modules)
sys.exit(0 if err < 1e-4 * max(1.0, float(np.abs(expected).max())) else 1)
EOF
