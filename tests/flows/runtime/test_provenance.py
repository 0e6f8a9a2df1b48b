"""Where a run comes from: the code's commit (clean or not) and the machine and library versions a benchmark report
records (flows/runtime/provenance.py); :func:`check_provenance` is what every report writer's test asserts of its
record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import faiss
import pytest
import torch

from flows.runtime.provenance import code_commit, describe_run, file_commit, git_commit, provenance_line
from tests.conftest import REPO

FIELDS = {"commit", "tree_clean", "cpu", "cores", "cores_usable", "gpu", "torch", "faiss", "python", "platform"}


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def check_provenance(p: dict[str, Any], md: str | None = None) -> None:
    """``p`` is :func:`describe_run`'s record of this checkout and machine (the commit: ``git rev-parse HEAD``, or an
    ancestor of it where a commit landed since the report was written); ``md``, the report, shows it in one line."""
    assert set(p) == FIELDS
    head = _git("rev-parse", "HEAD")
    landed_since = subprocess.run(["git", "merge-base", "--is-ancestor", p["commit"], head], cwd=REPO).returncode == 0
    assert p["commit"] == head or landed_since
    assert len(p["commit"]) == 40 and isinstance(p["tree_clean"], bool)
    assert isinstance(p["cpu"], str) and p["cpu"]
    assert p["cores"] == os.cpu_count() and 1 <= p["cores_usable"] <= p["cores"]
    if torch.cuda.is_available():
        assert torch.cuda.get_device_name(0) in p["gpu"]
    else:
        assert p["gpu"] is None
    assert (p["torch"], p["faiss"]) == (torch.__version__, faiss.__version__)
    if md is not None:
        assert f"provenance: {provenance_line(p)}" in md


def test_the_run_is_described_by_this_checkouts_commit_and_this_machine():
    before = _git("rev-parse", "HEAD")
    p = describe_run()
    assert p["commit"] in {before, _git("rev-parse", "HEAD")}
    check_provenance(p)
    line = provenance_line(p)
    assert line.startswith(f"code {p['commit'][:12]}") and f"{p['cores']} cores" in line
    assert f"torch {torch.__version__}, FAISS {faiss.__version__}" in line


def test_a_machine_without_faiss_is_described_and_says_so(monkeypatch):
    """A bare GPU image runs the training benchmarks without FAISS (scripts/gpu_budget.sh): described, not failed."""
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
    p = describe_run()
    assert p["faiss"] is None and p["torch"] == torch.__version__
    assert f"torch {torch.__version__}, FAISS not installed, Python" in provenance_line(p)


def test_the_commit_and_whether_tracked_files_changed_are_read_from_the_checkout(tmp_path: Path):
    assert code_commit(tmp_path) is None and git_commit(tmp_path) == {}  # not a checkout: nothing claimed
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "a.py").write_text("x = 1\n")
    _git("add", "a.py", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one", cwd=repo)
    head = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "new.py").write_text("")  # untracked: the tree is still clean
    assert code_commit(repo) == (head, True)
    (repo / "a.py").write_text("x = 2\n")
    assert code_commit(repo) == (head, False)
    assert git_commit(repo) == {"mlflow.source.git.commit": head, "bctflow.git_dirty": "true"}


@pytest.mark.parametrize(
    ("commit", "clean", "gpu", "said"),
    [
        ("a" * 40, True, None, "code aaaaaaaaaaaa; CPU Xeon, 8 cores (4 usable); GPU none;"),
        ("b" * 40, False, "H100", "code bbbbbbbbbbbb with uncommitted changes; CPU Xeon, 8 cores (4 usable); GPU H100"),
        (None, None, None, "code outside a git checkout; CPU Xeon"),
    ],
)
def test_the_report_line_says_the_commit_whether_it_was_clean_and_the_gpu(commit, clean, gpu, said):
    p = {"commit": commit, "tree_clean": clean, "cpu": "Xeon", "cores": 8, "cores_usable": 4, "gpu": gpu,
         "torch": "2.9", "faiss": "1.12", "python": "3.11.7", "platform": "Linux-x"}  # fmt: skip
    line = provenance_line(p)
    assert line.startswith(said) and line.endswith("torch 2.9, FAISS 1.12, Python 3.11.7; Linux-x")


def test_a_files_commit_is_the_last_that_changed_it_and_says_when_the_copy_differs(tmp_path: Path):
    """A committed report's provenance (the capacity plan's rates): ``<hash> <date>`` of the last commit of it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    report = tmp_path / "r.json"
    report.write_text("{}")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "r.json"], check=True)
    subprocess.run([*git, "commit", "-qm", "r"], check=True)
    head = subprocess.run([*git, "log", "-1", "--format=%h %cs"], capture_output=True, text=True).stdout.strip()
    assert file_commit(Path("r.json"), tmp_path) == head
    report.write_text('{"changed": 1}')
    assert file_commit(Path("r.json"), tmp_path) == f"{head}, changed since"
    assert file_commit(Path("never.json"), tmp_path) is None  # git holds no commit of it
    assert file_commit(Path("r.json"), tmp_path / "elsewhere") is None  # not a checkout
