#!/usr/bin/env bash
# The budget study's GPU points (benchmarks/profiles/cpu_budget.yaml, `where: gpu`): Fashion-MNIST 28x28
# ext_class at 1,000 / 3,000 / 6,000 images per class for 12 / 24 / 48 epochs, the last with three seeds, then the
# summary (benchmarks/results/cpu_budget/budget/) over every point that has a table.
#
#   scripts/gpu_budget.sh prepare        # here, with network to the package index: .gpu/ (wheels + Fashion-MNIST)
#   scripts/gpu_budget.sh run [WORKERS]  # on the GPU machine, in the repository root (device: carry .gpu)
#
# `prepare` fills .gpu/ (git-ignored through .git/info/exclude) with what a bare GPU image lacks — the wheels of the
# packages bctflow's bench imports that the image does not hold, for CPython 3.12 manylinux — and the four
# Fashion-MNIST files from Debian's dataset-fashion-mnist. `run` installs the wheels into /tmp/site, puts the data
# where the dataset cache looks, trains the GPU points on a local Dask cluster of WORKERS processes sharing the GPU
# (default 6, eager: each of the ~40 small models would pay its own compilation) and packs the tables, the records
# and the summary into $OUT/cpu_budget.tgz (unpack at the repository root and commit). The model cache stays in
# /tmp/bctflow-budget, so a second `run` on the same machine resumes where the first stopped; a run on a fresh machine
# finds the finished new models in the committed records and trains only the old models and φ* again.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 prepare | run [WORKERS]}
py=${PYTHON:-python3}
# not faiss-cpu (18 MB): the training benchmarks do not search an index, and the wheels, the data and the tree must
# travel in 64 MiB together
wheels=(alembic sqlalchemy mako braceexpand webdataset pydantic pydantic-core annotated-types typing-inspection
        dask distributed tornado zict tblib locket partd)

if [ "$mode" = prepare ]; then
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    rm -rf .gpu/whl && mkdir -p .gpu/whl .gpu/fashion_mnist
    for name in "${wheels[@]}"; do
        version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")
        .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any -d .gpu/whl "$name==$version"
    done
    cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion_mnist/
    du -sh .gpu
    exit 0
fi

[ "$mode" = run ] || { echo "unknown mode $mode: use prepare or run" >&2; exit 2; }
[ -d .gpu/whl ] || { echo ".gpu/ is missing: run '$0 prepare' here and carry .gpu" >&2; exit 2; }
workers=${2:-6}
out=${OUT:-/tmp/gpu-budget-out}
home=/tmp/bctflow-budget
mkdir -p "$out" "$home/datasets/fashion_mnist"
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .gpu/fashion_mnist/*.gz "$home/datasets/fashion_mnist/"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
set +e
$py -m bctflow.cli bench budget --profile cpu_budget --where gpu --workers "$workers" --home "$home" \
    --set train.compile=off 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
set -e
tar czf "$out/cpu_budget.tgz" benchmarks/results/cpu_budget
exit "$status"
