"""`bctflow demo` runs params.yaml's `generations:` (bctflow/generations.py): the chain it plans is the declared one,
and a params.yaml that declares none is refused before anything is written. `bctflow lineage --png` draws the
committed lineage."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bctflow.cli import app
from bctflow.generations import radius_health
from tests.helpers import lineage_story, run_generation, write_params


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


def test_one_run_opens_the_lineage_at_most_three_times_reads_its_parent_once_and_keeps_its_plan(
    tmp_path: Path, prefect_harness, monkeypatch
):
    """`bctflow run` of an aligned generation: one read-only lineage session before the flow (an interrupted commit,
    a finished rerun, the plan), one under the workspace lock, one to commit; the parent checkpoint's bytes read
    once (its sha256 and its weights, for the plan's checks, ζ, the aligned training and the evaluation); and the
    last step runs on the plan make_plan returned, unchanged."""
    import flows.generation.steps
    import flows.planning
    import registry.lineage
    from components.models import checkpoint

    params, home = tmp_path / "params.yaml", tmp_path / "ws"
    write_params(params, ["geometry.zeta_rule=percentile"])  # ζ from data reads the parent too
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    parent = (home / "generations" / "gen_000" / "model.pt").resolve()

    opens: list[bool] = []
    init = registry.lineage.LineageDB.__init__

    def counted_init(self, url, **kw):
        opens.append(bool(kw.get("readonly")))
        init(self, url, **kw)

    reads: list[Path] = []
    read_bytes = checkpoint._read_bytes

    def counted_read(path):
        reads.append(Path(path).resolve())
        return read_bytes(path)

    made, seen = [], []
    plan_once = flows.planning.make_plan

    def planned(*a, **kw):
        made.append(plan_once(*a, **kw))
        return made[-1]

    def committed(plan, *a, **kw):
        seen.append(plan)
        return commit(plan, *a, **kw)

    commit = flows.generation.steps.commit
    monkeypatch.setattr(registry.lineage.LineageDB, "__init__", counted_init)
    monkeypatch.setattr(checkpoint, "_read_bytes", counted_read)
    monkeypatch.setattr(flows.planning, "make_plan", planned)
    monkeypatch.setattr(flows.generation.steps, "commit", committed)
    res = CliRunner().invoke(app, ["run", "--home", str(home), "--params", str(params), "--alignment", "hbct"])
    assert res.exit_code == 0, res.output[-3000:]
    assert len(made) == 1 and seen == made  # the last step ran on the very plan make_plan returned
    assert len(opens) <= 3 and opens.count(False) == 1, opens  # read, read under the lock, write the commit
    assert reads.count(parent) == 1, reads


def test_lineage_png_writes_the_picture_of_the_committed_lineage_and_refuses_a_folder(tmp_path: Path):
    home, params = tmp_path / "ws", tmp_path / "params.yaml"
    home.mkdir()
    lineage_story(home / "lineage.db").close()
    write_params(params)
    out = tmp_path / "pictures" / "lineage.png"  # its folder is made
    lineage = ["lineage", "--home", str(home), "--params", str(params)]
    res = CliRunner().invoke(app, [*lineage, "--png", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote the lineage picture to {out}" in res.output and "★ production (forced)" in res.output  # + table
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    res = CliRunner().invoke(app, [*lineage, "--png", str(tmp_path)])
    assert res.exit_code == 2
    assert f"error: --png {tmp_path} is a directory; give the PNG file to write" in " ".join(res.output.split())
    under_a_file = params / "lineage.png"  # its "folder" is a file
    res = CliRunner().invoke(app, [*lineage, "--png", str(under_a_file)])
    assert res.exit_code == 2
    assert f"error: --png {under_a_file}: cannot write it (" in " ".join(res.output.split())
    assert "pick a path you can write" in res.output


def test_the_radius_line_shows_the_cone_only_for_a_generation_that_has_one():
    diag = {
        "clip_fraction_gallery": 0.99,
        "clip_fraction_gallery_parent": 0.0,
        "uncertainty_parent_seen": 0.41,
        "uncertainty_parent_unseen": 0.595,
    }
    bct = radius_health({**diag, "in_cone_fraction": float("nan")})  # BCT has no entailment cone
    assert (
        bct
        == "radius health: clip fraction (gallery, new/parent) 0.99/0.00, parent uncertainty seen/unseen 0.410/0.595"
    )
    assert radius_health(diag) == bct
    assert radius_health({**diag, "in_cone_fraction": 0.0}) == bct + ", in-cone 0.000"
