"""The command line's own options (bctflow/shell.py, bctflow/choices.py): `--version`, shell completion, and the
options with a fixed set of values as choices that `--help` lists, completion offers and the parser enforces."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import typer._completion_shared
import typer.completion
from typer import rich_utils
from typer.testing import CliRunner

import bctflow
from bctflow.cli import app
from components.indexing.stores.faiss import INDEX_TYPES
from components.losses.catalog import list_alignments
from tests.conftest import REPO


def _invoke(args: list[str], **env: str):
    return CliRunner().invoke(app, args, prog_name="bctflow", env=env or None)


def _complete(words: str) -> list[str]:
    """What bash completion offers after ``words`` (the script `--show-completion bash` installs calls this)."""
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    res = _invoke([], _BCTFLOW_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    assert res.exit_code == 0, res.output
    return res.output.split()


def test_version_prints_the_package_version_which_pyproject_takes_from_bctflow():
    res = _invoke(["--version"])
    assert res.exit_code == 0 and res.output == f"bctflow {bctflow.__version__}\n"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"]  # one home: bctflow.__version__
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "bctflow.__version__"}
    assert version("bctflow") == bctflow.__version__  # the installed metadata agrees


def test_version_from_the_console_script_entry_point(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-m", "bctflow.cli", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == f"bctflow {bctflow.__version__}\n"


@pytest.mark.parametrize(
    "shell, installs",
    [
        ("bash", "complete -o default -F _bctflow_completion bctflow"),
        ("zsh", "compdef _bctflow_completion bctflow"),
        ("fish", "complete --command bctflow"),
    ],
)
def test_show_completion_emits_the_script_of_the_users_shell(monkeypatch, shell: str, installs: str):
    """`--show-completion` (and `--install-completion`) detect the shell they run in; here it is set."""
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: shell)
    res = _invoke(["--show-completion"])
    assert res.exit_code == 0
    assert f"_BCTFLOW_COMPLETE=complete_{shell}" in res.output and installs in res.output


def test_completion_offers_commands_and_the_choices_of_an_option():
    assert _complete("bctflow ba") == ["backfill"]
    assert _complete("bctflow backfill --order ") == ["uncertainty", "random", "oldest"]
    assert _complete("bctflow run --alignment hb") == ["hbct"]
    assert _complete("bctflow bench scale --index ") == list(INDEX_TYPES)
    profiles = _complete("bctflow bench --profile ")
    assert {"cpu", "gpu", "digits"} <= set(profiles)
    assert profiles == sorted(p.stem for p in (REPO / "benchmarks" / "profiles").glob("*.yaml"))


def test_installed_bash_completion_completes_through_the_console_script(monkeypatch, tmp_path: Path):
    """`--install-completion` writes the script and sources it from ~/.bashrc; bash, running that script's function
    as a TAB press does, gets the choices from the real `bctflow` console script."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(typer._completion_shared, "_get_shell_name", lambda: "bash")
    res = _invoke(["--install-completion"])
    script = tmp_path / ".bash_completions" / "bctflow.sh"
    assert res.exit_code == 0 and f"bash completion installed in {script}" in res.output
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    press_tab = (
        f"source '{script}'; COMP_WORDS=(bctflow backfill --order ''); COMP_CWORD=3; "
        '_bctflow_completion bctflow; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    console_script = Path(sys.executable).parent / "bctflow"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{console_script.parent}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", press_tab], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["uncertainty", "random", "oldest"]


def test_help_lists_the_choices(monkeypatch):
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", 400)  # one line per option: choices are not wrapped
    run_help = _invoke(["run", "--help"]).output
    assert "<" + "|".join(list_alignments()) + ">" in run_help  # every method of the plugin catalog
    assert "<uncertainty|random|oldest>" in _invoke(["backfill", "--help"]).output
    assert f"<{'|'.join(INDEX_TYPES)}>" in _invoke(["bench", "scale", "--help"]).output
    scenarios = "<ext_data|ext_class|new_arch|both|sequential|partial_backfill>"
    assert scenarios in _invoke(["bench", "--help"]).output


@pytest.mark.parametrize(
    "args, valid",
    [
        (["backfill", "--order", "sideways"], "'uncertainty', 'random', 'oldest'"),
        (["backfill", "--plan", "--items", "10", "--device", "tpu"], "'cpu', 'cuda'"),
        (["run", "--alignment", "hbtc"], ", ".join(repr(n) for n in list_alignments())),
        (["bench", "scale", "--items", "10", "--out", "o", "--index", "kdtree"], ", ".join(map(repr, INDEX_TYPES))),
        (["bench", "--scenario", "ext_dta"], "'ext_data', 'ext_class', 'new_arch', 'both', 'sequential'"),
    ],
)
def test_a_value_outside_the_choices_is_refused_by_the_parser_with_the_valid_ones(tmp_path: Path, args, valid):
    home = tmp_path / "ws"
    res = _invoke([*args, "--home", str(home)] if args[0] != "bench" else args)
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2
    assert f"Invalid value for '{args[-2]}'" in text and f"{args[-1]!r} is not one of {valid}" in text
    assert not home.exists()  # refused before the command ran


def test_every_option_has_help_and_no_flag_shows_a_value_placeholder():
    """The whole command tree: each option and argument says what it does, and a flag's help row shows no type
    (``--reset <bool>`` read as if the flag took a value), typer's own ``--help`` included."""
    from tests.bctflow.test_cli import command_paths

    root = typer.main.get_command(app)
    flags = 0
    for path in command_paths():
        cmd = root
        for word in path:
            cmd = cmd.commands[word]
        ctx = cmd.make_context(" ".join(["bctflow", *path]), [], resilient_parsing=True)
        for param in cmd.get_params(ctx):  # its options and arguments, then --help
            where = f"bctflow {' '.join(path)} {param.opts}"
            assert param.help, f"{where} has no help text"
            if getattr(param, "is_flag", False):
                flags += 1
                assert param.display_type_rich(ctx) is None, where
        assert "<bool>" not in _invoke([*path, "--help"]).output
    assert flags >= 25  # --help of every command, --reset, --reference/--no-reference, --force, --json, ...


def test_a_number_option_below_its_range_is_refused_by_the_parser(tmp_path: Path):
    home = tmp_path / "ws"
    res = _invoke(["run", "--epochs", "0", "--home", str(home)])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "Invalid value for '--epochs': Input should be greater than or equal to 1" in text
    assert not home.exists()  # refused before the command ran
