"""Where a run comes from: the Prefect flow run that executes it and the git commit of the code (docs/design.md §7.17),
and — for a benchmark's report — the machine and library versions it ran on (:func:`describe_run`).

The MLflow run of a generation is tagged with both; the Prefect flow run's artifact links back to the MLflow run.
A URL is given only where it can be opened: the Prefect UI's when a Prefect server was configured
(``PREFECT_API_URL``, or ``PREFECT_UI_URL`` for a UI elsewhere) — the temporary server a command starts without one
is gone when the command ends — and the MLflow UI's where the tracking store is a server (``http(s)://``); for a
database store (the workspace's default) the link is the page's path under ``mlflow ui``'s default address.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = [
    "MLFLOW_UI",
    "code_commit",
    "describe_run",
    "file_commit",
    "git_commit",
    "mlflow_run_url",
    "prefect_flow_run",
    "provenance_line",
]

#: where ``mlflow ui`` serves by default (a database tracking store has no URL of its own)
MLFLOW_UI = "http://127.0.0.1:5000"


def prefect_flow_run() -> dict[str, str]:
    """Tags naming the Prefect flow run this code runs in: id, name and (with a configured server) its UI URL.
    Empty outside a flow run."""
    from prefect.runtime import flow_run
    from prefect.utilities.urls import url_for

    run_id = flow_run.id
    if run_id is None:
        return {}
    tags = {"prefect.flow_run_id": str(run_id), "prefect.flow_run_name": str(flow_run.name)}
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_UI_URL"):
        url = url_for("flow-run", obj_id=str(run_id))  # the page Prefect's own "View at" log line names
        if url:
            tags["prefect.flow_run_url"] = str(url)
    return tags


def code_commit(root: Path | None = None) -> tuple[str, bool] | None:
    """The commit checked out in the code's git checkout and whether its tracked files are unchanged (untracked files
    do not count). None where the code is not a git checkout (an installed wheel) or git is not installed."""
    import components

    base = root if root is not None else Path(components.__file__).resolve().parent.parent
    if not (base / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(base), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(base), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head, not dirty


def file_commit(path: Path, root: Path | None = None) -> str | None:
    """The commit that last changed the file ``path`` as ``<short hash> <date>`` (a committed report's provenance),
    ending ``, changed since`` where the working tree's copy differs from it. None where the code is not a git
    checkout (an installed wheel), git is not installed, or git holds no commit of the file."""
    import components

    base = root if root is not None else Path(components.__file__).resolve().parent.parent
    if not (base / ".git").exists():
        return None
    try:
        last = subprocess.run(
            ["git", "-C", str(base), "log", "-1", "--format=%h %cs", "--", str(path)],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "-C", str(base), "status", "--porcelain", "--", str(path)],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return (last + (", changed since" if changed else "")) or None


def git_commit(root: Path | None = None) -> dict[str, str]:
    """MLflow's git tags for the code's checkout (commit; ``bctflow.git_dirty``: uncommitted changes to tracked
    files). Empty where :func:`code_commit` finds no checkout."""
    state = code_commit(root)
    if state is None:
        return {}
    head, clean = state
    return {"mlflow.source.git.commit": head, "bctflow.git_dirty": str(not clean).lower()}


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpu() -> str | None:
    """The CUDA devices torch sees (``2 x NAME`` for several alike), or None."""
    import torch

    if not torch.cuda.is_available():
        return None
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if len(set(names)) == 1:
        return names[0] if len(names) == 1 else f"{len(names)} x {names[0]}"
    return ", ".join(names)


def describe_run() -> dict[str, Any]:
    """What a benchmark's numbers were measured with: the code (``commit``, None outside a git checkout;
    ``tree_clean``: no uncommitted changes to tracked files, None likewise), the machine (``cpu`` model, ``cores``
    of the machine and ``cores_usable`` by this process, ``gpu`` the CUDA devices or None, ``platform``) and the
    versions of ``torch``, ``faiss`` and ``python``. Every report ``bctflow bench`` writes records it under
    ``provenance`` (rendered by :func:`provenance_line`); ``faiss`` is None where it is not installed (a bare GPU
    image running the training benchmarks: scripts/gpu_budget.sh)."""
    import torch

    try:
        import faiss

        faiss_version: str | None = faiss.__version__
    except ImportError:
        faiss_version = None

    state = code_commit()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "commit": state[0] if state else None,
        "tree_clean": state[1] if state else None,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "gpu": _gpu(),
        "torch": torch.__version__,
        "faiss": faiss_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def provenance_line(p: dict[str, Any]) -> str:
    """:func:`describe_run`'s record in one line of a report."""
    if p["commit"] is None:
        code = "code outside a git checkout"
    else:
        code = f"code {p['commit'][:12]}" + ("" if p["tree_clean"] else " with uncommitted changes")
    return (
        f"{code}; CPU {p['cpu']}, {p['cores']} cores ({p['cores_usable']} usable); GPU {p['gpu'] or 'none'}; "
        f"torch {p['torch']}, FAISS {p['faiss'] or 'not installed'}, Python {p['python']}; {p['platform']}"
    )


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of a run: on the tracking server itself, else under ``mlflow ui``'s default address."""
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else MLFLOW_UI
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
