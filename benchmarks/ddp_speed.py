"""One process against data-parallel ranks on this machine: the same HBCT training (digits, params.yaml's model).

``python -m benchmarks.ddp_speed EPOCHS MODE...`` with modes ``one1`` / ``one2`` (one process, 1 or 2 torch threads)
and ``two`` (2 gloo ranks through :func:`~components.training.launch.train_distributed`, 1 thread each); prints the
wall time, the training seconds and img/s of each (docs/design.md §7.13).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from components.geometry import Lorentz
from components.losses import create_alignment
from components.models import build_model
from components.training import train_model
from components.training.data import training_data
from components.training.job import TrainJob
from components.training.launch import train_distributed
from flows.gallery import dataset_splits
from flows.params import load_params, model_spec_from_params, train_config_from_params

REPO = Path(__file__).resolve().parents[1]


def main(epochs: int, modes: list[str]) -> None:
    p = load_params(REPO / "params.yaml", ["data.dataset=digits", f"train.epochs={epochs}"])
    with tempfile.TemporaryDirectory(prefix="bctflow-ddp-") as tmp:
        train = dataset_splits(p, Path(tmp) / "datasets").train
        order = list(range(train.num_classes))
        names = [str(c) for c in order]
        spec = model_spec_from_params(p, train, order, names, geometry=Lorentz.name, zeta=1.2)
        old_spec = model_spec_from_params(p, train, order, names, geometry=Lorentz.name, zeta=1.0)
        cfg, data = train_config_from_params(p), training_data(train, order)

        def fresh(seed: int, s):
            torch.manual_seed(seed)
            return build_model(s)

        old = fresh(9, old_spec).eval()
        for mode in modes:
            t0, ckpt = time.perf_counter(), Path(tmp) / f"ck-{mode}-{time.time_ns()}"
            if mode.startswith("one"):
                torch.set_num_threads(int(mode[3:]))
                r = train_model(fresh(0, spec), data, cfg, create_alignment("hbct"), ckpt, old_model=old)
            else:
                r = train_distributed(TrainJob(fresh(0, spec), data, cfg, create_alignment("hbct"), ckpt, old), 2)
            wall = time.perf_counter() - t0
            print(
                f"{mode}: {len(data)} images x {cfg.epochs} epochs, batch {cfg.batch_size}: wall {wall:.1f} s, "
                f"training {r.seconds:.1f} s ({len(data) * cfg.epochs / r.seconds:.0f} img/s), {r.device}, "
                f"last loss {r.history[-1]['loss']:.5f}",
                flush=True,
            )


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
