"""`bctflow demo` runs params.yaml's `generations:` (bctflow/generations.py): the chain it plans is the declared one,
and a params.yaml that declares none is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bctflow.cli import app
from tests.helpers import write_params


def _demo(tmp_path: Path, generations: str) -> tuple[int, str, Path]:
    params, home = tmp_path / "params.yaml", tmp_path / "ws"
    write_params(params, [f"generations={generations}"])
    res = CliRunner().invoke(app, ["demo", "--home", str(home), "--params", str(params)])
    return res.exit_code, " ".join(res.output.split()), home


def test_the_demo_without_declared_generations_is_refused(tmp_path: Path):
    code, out, home = _demo(tmp_path, "[]")
    assert code != 0 and "error: params.yaml declares no `generations:`; add the chain to reproduce" in out
    assert not home.exists()


def test_the_demo_plans_the_declared_chain(tmp_path: Path):
    """A declared first generation the dataset cannot serve is what the demo refuses: it plans params.yaml's chain
    (named `first`, classes 0 and 42), not a chain of its own."""
    code, out, home = _demo(tmp_path, "[{name: first, classes: [0, 42]}, {name: second, classes: all}]")
    assert code != 0 and "generation first: independent on classes [0, 42]" in out
    assert "error: classes [42] do not exist (the dataset has classes 0..9)" in out
    assert not (home / "generations").exists()
