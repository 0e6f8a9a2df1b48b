"""Benchmarks end to end on digits with tiny real models: tables, λ selection, seeds, caching, sequential."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from benchmarks.profile import MEASURED_DEFAULTS, PROFILE_DIR, BenchSettings, Profile, load_profile
from benchmarks.records import RecordStore
from benchmarks.report import write_table_report
from benchmarks.report_sequential import write_sequential_report
from benchmarks.rerender import rerender_table
from benchmarks.run import _context
from benchmarks.runner import Bench, ModelRequest
from benchmarks.scenarios import make_scenario, run_table
from benchmarks.selection import SELECTION_RULES
from benchmarks.sequential import run_sequential
from components.errors import ConfigError
from flows.params import apply_overrides, load_params
from flows.runtime.provenance import describe_run
from tests.conftest import REPO, TINY_OVERRIDES
from tests.flows.runtime.test_provenance import check_provenance

ARCH = {"backbone": "resnet18", "backbone_kwargs": {"channels": [8, 8, 16, 16]}}


def tiny_bench(tmp: Path, methods: list[dict], records: Path | None = None, **settings) -> Bench:
    """A bench of tiny models on digits (``tmp / "cache"``), keeping new models' records in ``records`` if given; its
    params resolve as a profile's do (under the defaults the profiles were measured with)."""
    bench = BenchSettings(
        methods=methods, old_arch=ARCH, new_arch=ARCH, **{"seeds": [0, 1], "tune_weights": [0.3, 1.0], **settings}
    )
    profile = Profile(name="tiny", description="test", bench=bench)
    params = profile.resolved_params(
        apply_overrides(
            load_params(REPO / "params.yaml"),
            [*TINY_OVERRIDES, "model.embed_dim=16", "data.max_train_per_class=40", "data.max_test_per_class=15"],
        )
    )
    logs: list[str] = []
    store = RecordStore(records) if records is not None else None
    b = Bench(profile, params, tmp / "cache", tmp / "datasets", log=logs.append, records=store)
    b.logs = logs  # type: ignore[attr-defined]
    return b


CTX = {
    "command": "test",
    "profile": "tiny",
    "profile_description": "t",
    "dataset": "digits",
    "n_train": 0,
    "n_val": 0,
    "n_test": 0,
    "val_fraction": 0.1,
    "machine": "test",
    "seeds": [0, 1],
    "epochs": {},
    "tune_weights": [0.3, 1.0],
    "p_up_floor": -0.01,
    "selection_rule": "the rule",
    "date": "today",
    "wall_seconds": 1.0,
    "provenance": describe_run(),
}


def check_written_provenance(folder: Path) -> None:
    """The report in ``folder`` records the run's provenance (results.json's context) and shows it in report.md."""
    doc = json.loads((folder / "results.json").read_text())
    check_provenance(doc["context"]["provenance"], (folder / "report.md").read_text())


def test_ext_class_table(tmp_path: Path):
    methods = [
        {"name": "bct", "method": "bct", "tune": True},
        {"name": "psp", "method": "psp"},
        {"name": "hbct", "method": "hbct", "geometry": "lorentz"},
    ]
    b = tiny_bench(tmp_path, methods)
    sc = make_scenario(b, "ext_class")
    assert sc.old_classes == [0, 1, 2, 3, 4]
    res = run_table(b, sc)
    names = [(r.name, r.seed) for r in res.rows]
    assert names == [
        ("bct", 0),
        ("psp", 0),
        ("hbct", 0),
        ("bct", 1),
        ("hbct", 1),
    ]  # extra seed for hbct and the best baseline
    assert res.best_baseline == "bct"
    for r in res.rows:
        for k in ("cmc@1", "map"):
            den = r.ref_self[k] - r.old_self[k]
            assert r.p_com_den[k] == pytest.approx(den)
            if r.p_com[k] is not None:
                assert r.p_com[k] == pytest.approx((r.cross[k] - r.old_self[k]) / den)
            assert r.p_up[k] == pytest.approx((r.self_[k] - r.ref_self[k]) / r.ref_self[k])
    bct = res.rows[0]
    assert bct.weight in (0.3, 1.0) and "val mAP" in bct.selection  # chosen on the validation split
    assert bct.selection_rule in SELECTION_RULES and bct.configurations == 2  # one head × λ ∈ {0.3, 1}
    assert {r.configurations for r in res.rows if r.name == "hbct"} == {1}  # fixed λ, one head: still the rule
    assert res.rows[3].selection == "configuration from seed 0" and res.rows[3].selection_rule == bct.selection_rule
    psp = res.rows[1]
    assert psp.space == "psp" and psp.p_up["map"] == 0.0 and psp.seconds == 0.0
    assert psp.roles["old"] == bct.roles["old"] and psp.roles["new"] == psp.roles["ref"] == bct.roles["ref"]  # φ*
    hb = res.rows[2]
    assert set(hb.diagnostics) >= {
        "clip_fraction_new",
        "in_cone_fraction",
        "uncertainty_old_seen",
        "uncertainty_old_unseen",
    }
    md = write_table_report(res, CTX, tmp_path / "report")
    text = md.read_text()
    assert "| bct | euclidean/embedding |" in text and "P_com denominator" in text and "Every method over the" in text
    rows = list(csv.DictReader((tmp_path / "report" / "results.csv").open()))
    assert {r["method"] for r in rows} == {"bct", "psp", "hbct"} and len(rows) == 5 * 3
    hb_csv = [r for r in rows if r["method"] == "hbct"]  # a Lorentz row carries its diagnostics as columns
    assert all(float(r["clip_fraction_new"]) >= 0 and float(r["uncertainty_std_new"]) >= 0 for r in hb_csv)
    assert all(r["in_cone_fraction"] != "" for r in hb_csv) and all(r["clip_fraction_new"] == "" for r in rows[:3])
    # each seed trains its own old model and φ*: their variance is part of the seed spread
    by_seed = {r.seed: r for r in res.rows if r.name == "hbct"}
    assert by_seed[0].old_self != by_seed[1].old_self and by_seed[0].ref_self != by_seed[1].ref_self
    # a second run is served from the cache: same numbers, nothing trained
    b2 = tiny_bench(tmp_path, methods)
    res2 = run_table(b2, make_scenario(b2, "ext_class"))
    assert not any(m.strip().startswith("training") for m in b2.logs)  # type: ignore[attr-defined]
    assert [r.cross for r in res2.rows] == [r.cross for r in res.rows]
    # the seed spread gives every mean P_com its mean denominator; a report re-rendered from results.json is the same
    spread = text[text.index("## Every method over the seeds") :]
    den = [r.p_com_den["map"] for r in res.rows if r.name == "hbct"]
    assert "| P_com mAP | its denominator |" in spread and f"{statistics.mean(den):.4f} ± " in spread
    assert f" ± {statistics.stdev(den):.4f} |" in spread  # the sample std
    # and the HBCT diagnostics the issue judges (saturation, uncertainty spread, the cone) as mean ± std per method
    hb_rows = [r for r in res.rows if r.name == "hbct"]
    clip = statistics.mean(r.diagnostics["clip_fraction_new"] for r in hb_rows)
    section = spread[spread.index("## Lorentz diagnostics against this dataset's references") :].split("\n## ")[0]
    diag_line = next(x for x in section.splitlines() if x.startswith("| hbct | params | 0, 1 |"))
    assert f"| {clip:.3f} ± " in diag_line and "| 0.100 ± 0.000 |" in diag_line  # ε 0.1 on both seeds
    top = max(h["clip_fraction_new"] for h in res.heads if h["method"] == "hbct")  # the table's own reference
    assert ("saturated reference: hbct on head params" if top >= 0.5 else "no configuration tried saturated") in section
    assert "| bct |" not in section  # a Euclidean method has no such diagnostics
    check_written_provenance(tmp_path / "report")
    rendered = rerender_table(tmp_path / "report")  # the run's provenance, not the re-rendering's
    assert rendered.read_text() == text


def test_simplex_method_not_applicable_when_class_order_does_not_extend(tmp_path: Path):
    b = tiny_bench(tmp_path, [{"name": "lsp", "method": "lsp"}], old_class_fraction=0.5)
    sc = make_scenario(b, "ext_class")
    # an old model whose class order is not a prefix of the new one
    from dataclasses import replace as dc_replace

    sc = dc_replace(sc, old_classes=[3, 1, 2])
    res = run_table(b, sc)
    assert res.rows[0].selection == "not applicable" and "extends" in res.rows[0].note


def test_sequential_matrix_and_summary(tmp_path: Path):
    methods = [
        {"name": "bct", "method": "bct"},
        {"name": "bt2", "method": "bt2", "options": {"extra_dims": 8}},
        {"name": "psp", "method": "psp"},
    ]
    b = tiny_bench(
        tmp_path,
        methods,
        sequential_stages=3,
        sequential_switch_at=2,
        sequential_methods=["independent", "bct", "bt2", "psp"],
    )
    res = run_sequential(b)
    assert res.stages == [[0, 1, 2], [0, 1, 2, 3, 4, 5, 6], list(range(10))]
    for name in ("independent", "bct", "bt2", "psp"):
        mat = res.matrices[name]["map"]
        assert all(
            mat[t][k] is not None for t in range(3) for k in range(t + 1)
        )  # BT² prefixes nest, so every pair is comparable
        lower = [mat[t][k] for t in range(3) for k in range(t + 1)]
        s = res.summary[name]["map"]
        assert s["aa"] == pytest.approx(sum(lower) / len(lower))
        ok = [mat[t][k] > mat[k][k] for t in range(3) for k in range(t)]
        assert s["ac"] == pytest.approx(sum(ok) / 3)
    md = write_sequential_report(res, CTX, tmp_path / "seq")
    assert (tmp_path / "seq" / "compat_matrix_map.png").stat().st_size > 1000
    assert "| bt2 |" in md.read_text()
    data = json.loads((tmp_path / "seq" / "results.json").read_text())
    assert set(data["summary"]) == {"independent", "bct", "bt2", "psp"}
    check_written_provenance(tmp_path / "seq")


def test_a_profile_runs_under_the_defaults_it_was_measured_with_whatever_params_yaml_ships(tmp_path: Path):
    """The shipped defaults moved (bct at λ 3, the tanh s = 4 Lorentz head); every profile still resolves to the ones
    its tables were measured with, and its own params (a head's) still win over them."""
    shipped = load_params(REPO / "params.yaml")
    assert (shipped.geometry.radial, shipped.alignment.method) == ("tanh", "bct")
    for name in ("cpu_equal", "digits", "cpu_budget"):
        _, p = load_profile(name, REPO / "params.yaml")
        got = {k: p.as_dict()[k.split(".")[0]][k.split(".")[1]] for k in MEASURED_DEFAULTS}
        assert got == MEASURED_DEFAULTS, name
    mine = tmp_path / "p.yaml"
    mine.write_text("extends: cpu\nparams: {geometry: {radial: tanh}, train: {label_smoothing: 0.3}}\n")
    (tmp_path / "cpu.yaml").write_text((PROFILE_DIR / "cpu.yaml").read_text())
    _, p = load_profile(str(mine), REPO / "params.yaml")
    assert (p.geometry.radial, p.train.label_smoothing, p.model.mlr_scale) == ("tanh", 0.3, 1.0)


def test_profiles_load_and_bad_profile_is_refused(tmp_path: Path):
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    assert {"cpu", "cpu_hbct_ablations", "cpu_hbct_radius", "digits", "gpu"} <= set(names)
    for name in names:
        prof, params = load_profile(name, REPO / "params.yaml")
        assert prof.bench.methods and params.data.dataset in ("fashion_mnist", "cifar100", "digits")
    bad = tmp_path / "bad.yaml"
    bad.write_text("bench: {methods: [], old_arch: {backbone: resnet18}, new_arch: {backbone: resnet18}, typo: 1}\n")
    with pytest.raises(ConfigError, match="typo"):
        load_profile(str(bad))
    with pytest.raises(ConfigError, match=f"available: {', '.join(names)} "):
        load_profile("no-such-profile")
    arch = "old_arch: {backbone: resnet18}, new_arch: {backbone: resnet18}"
    for grid, needle in (
        ("{tau: [1.0]}", "grid tau=1.0: alignment 'bct' has no option"),
        ("{tau: []}", "grid \\[.tau.\\] must list at least one value"),
    ):
        bad.write_text(f"bench: {{methods: [{{name: b, method: bct, grid: {grid}}}], {arch}}}\n")
        with pytest.raises(ConfigError, match=needle):
            load_profile(str(bad))
    # a method may name the heads of its geometry it is tried with: only heads the profile has
    bad.write_text(f"bench: {{methods: [{{name: b, method: bct, heads: [clip]}}], {arch}}}\n")
    with pytest.raises(ConfigError, match=r"method 'b': heads \['clip'\] are not euclidean_heads \['params'\]"):
        load_profile(str(bad))
    # a train criterion that holds no role
    bad.write_text(
        f"bench: {{methods: [{{name: b, method: bct}}], train_criterion: 0.8, criterion_roles: [], {arch}}}\n"
    )
    with pytest.raises(ConfigError, match="criterion_roles is empty while train_criterion is set; name the roles it"):
        load_profile(str(bad))


def test_partial_backfill_curve_endpoints_are_cross_and_self(tmp_path: Path):
    from benchmarks.partial_backfill import (
        FRACTIONS,
        run_partial_backfill,
        write_partial_report,
    )

    b = tiny_bench(tmp_path, [{"name": "hbct", "method": "hbct", "geometry": "lorentz"}])
    res = run_partial_backfill(b, random_seeds=2)
    assert res.fractions == list(FRACTIONS)
    old = b.train_model(
        "old/lorentz",
        ModelRequest(b.selection(list(range(5))), geometry="lorentz", arch=b.settings.old_arch, zeta=1.0),
    )
    new_self = res.models["new_self"]
    for order in ("uncertainty", "random"):
        assert res.curves[order]["map"][-1] == pytest.approx(new_self["map"])  # f = 1: the new model's own gallery
        assert res.curves[order]["cmc@1"][-1] == pytest.approx(new_self["cmc@1"])
    assert res.curves["uncertainty"]["map"][0] == res.curves["random"]["map"][0]  # f = 0: pure cross retrieval
    assert res.spread["map"][0] == 0.0 and res.spread["map"][-1] == 0.0
    served = res.curves["uncertainty"]
    assert served["served_map"][-1] == pytest.approx(served["served_map_rank"][-1])  # f = 1: one generation, no merge
    assert len(served["served_map_rank"]) == len(FRACTIONS)
    assert old.key  # the old model is the cached one the curve used
    md = write_partial_report(res, CTX, tmp_path / "pb")
    assert (tmp_path / "pb" / "curve.png").stat().st_size > 1000 and "Area under the mAP curve" in md.read_text()
    assert "served mAP@R (merge: rank)" in md.read_text()
    check_written_provenance(tmp_path / "pb")


def test_the_context_of_every_table_records_where_the_run_comes_from(tmp_path: Path):
    """`bctflow bench` (and `bench routes`) hand every table writer this context: the code's commit and the machine."""
    b = tiny_bench(tmp_path, [{"name": "bct", "method": "bct"}])
    check_provenance(_context(b.profile, b.params, b, "bctflow bench --scenario ext_class")["provenance"])


def test_method_params_override_only_that_methods_model(tmp_path: Path):
    """Ablation entries (HBCT Tables 3–4) change their own model's ζ / curvature, not the old model or φ*."""
    methods = [
        {"name": "hbct", "method": "hbct", "geometry": "lorentz"},
        {"name": "zeta_n_1.0", "method": "hbct", "geometry": "lorentz", "params": {"geometry.delta_zeta": 0.0}},
        {"name": "learnable_K", "method": "hbct", "geometry": "lorentz", "params": {"geometry.learn_curvature": True}},
    ]
    b = tiny_bench(tmp_path, methods, extra_seed_methods=[])
    res = run_table(b, make_scenario(b, "ext_class"))
    assert [r.name for r in res.rows] == ["hbct", "zeta_n_1.0", "learnable_K"]
    zetas = {}
    for d in (tmp_path / "cache" / "cache").glob("*/done.json"):
        meta = json.loads(d.read_text())
        spec = json.loads(json.dumps(__import__("torch").load(d.parent / "model.pt", weights_only=True)["metadata"]))
        zetas[meta["label"]] = (spec["zeta"], spec["learn_curvature"])
    assert zetas["hbct/λ=0.3/seed=0"] == (1.2, False)
    assert zetas["zeta_n_1.0/λ=0.3/seed=0"] == (1.0, False)
    assert zetas["learnable_K/λ=0.3/seed=0"] == (1.2, True)
    assert zetas["old/lorentz/seed=0"] == (1.0, False) and zetas["reference/lorentz/seed=0"] == (1.2, False)
    # all three share the old model and φ*: same old self and reference self
    assert len({r.old_self["map"] for r in res.rows}) == 1 and len({r.ref_self["map"] for r in res.rows}) == 1


def test_each_method_gets_the_head_chosen_on_validation_with_its_own_old_model_and_reference(tmp_path: Path):
    heads = [
        {"name": "bn_cosine", "params": {"model.classifier": "cosine", "model.bn_neck": True}},
        {"name": "linear", "params": {"model.classifier": "linear", "model.bn_neck": False}},
    ]
    lorentz = [{"name": "clip", "geometry": "lorentz"}, {"name": "tanh", "geometry": "lorentz", "params": TANH}]
    methods = [{"name": "bct", "method": "bct"}, {"name": "hbct", "method": "hbct", "geometry": "lorentz"}]
    b = tiny_bench(tmp_path, methods, euclidean_heads=heads, lorentz_heads=lorentz, extra_seed_methods=["bct"])
    res = run_table(b, make_scenario(b, "ext_class"))
    hbct = next(r for r in res.rows if r.name == "hbct")
    assert hbct.head in ("clip", "tanh") and hbct.configurations == 2 and hbct.selection_rule in SELECTION_RULES
    assert hbct.diagnostics["clip_fraction_new"] is not None
    # every head tried is reported, the Lorentz ones with the radius diagnostics of new model, old model and φ*
    tried = {(h["method"], h["head"]): h for h in res.heads}
    assert set(tried) == {("bct", "bn_cosine"), ("bct", "linear"), ("hbct", "clip"), ("hbct", "tanh")}
    assert 0 <= tried["hbct", "tanh"]["clip_fraction_ref"] <= 1 and "clip_fraction_ref" not in tried["bct", "linear"]
    md = write_table_report(res, CTX, tmp_path / "report").read_text()
    assert "## Configurations tried" in md and "| hbct | tanh |" in md
    assert [h["chosen"] for h in res.heads].count(True) == 2  # one configuration per method
    bct = [r for r in res.rows if r.name == "bct"]
    assert len(bct) == 2 and bct[0].selection.startswith(bct[0].head) and bct[1].head == bct[0].head
    chosen = bct[0].head
    assert chosen in ("bn_cosine", "linear")
    specs = {}
    for d in (tmp_path / "cache" / "cache").glob("*/done.json"):
        label = json.loads(d.read_text())["label"]
        spec = torch.load(d.parent / "model.pt", weights_only=True)["metadata"]
        specs[label] = (spec["classifier"], spec["bn_neck"])
    # each head trained its own Euclidean lineage: old model, φ* and the method's new models
    assert specs["old/euclidean/bn_cosine/seed=0"] == ("cosine", True)
    assert specs["old/euclidean/linear/seed=0"] == ("linear", False)
    assert specs["reference/euclidean/linear/seed=0"] == ("linear", False)
    assert specs["bct/linear/λ=0.3/seed=0"] == ("linear", False)
    assert f"old/euclidean/{chosen}/seed=1" in specs  # the extra seed uses the chosen head's lineage
    assert not any(k.startswith("old/lorentz/") and "linear" in k for k in specs)
    # the Lorentz lineage tried its own heads: the default (no overrides: no tag) and the tanh squash
    cached = _cached(tmp_path)
    radial = {k: torch.load(d.parent / "model.pt", weights_only=True)["metadata"]["radial"] for k, d in cached}
    assert radial["old/lorentz/seed=0"] == "clip" and radial["reference/lorentz/seed=0"] == "clip"
    assert radial["old/lorentz/tanh/seed=0"] == "tanh" and radial["reference/lorentz/tanh/seed=0"] == "tanh"
    assert radial["hbct/tanh/λ=0.3/seed=0"] == "tanh" and radial["hbct/λ=0.3/seed=0"] == "clip"
    with pytest.raises(ValidationError, match="lorentz_heads must be"):
        tiny_bench(tmp_path, methods, lorentz_heads=[{"name": "x", "params": TANH}])


TANH = {"geometry.radial": "tanh"}


def _cached(tmp: Path) -> list[tuple[str, Path]]:
    """(label, done.json path) of every model in a tiny bench's cache."""
    return [(json.loads(d.read_text())["label"], d) for d in (tmp / "cache" / "cache").glob("*/done.json")]


def test_a_configuration_that_diverges_is_recorded_never_chosen_and_not_trained_again(tmp_path: Path):
    """λ = 1e39 (beyond float32) makes bct's loss non-finite: that configuration is left out of the choice (the
    table goes on), its divergence is stored in the cache, and a rerun does not train it again."""
    methods = [{"name": "bct", "method": "bct", "tune": True}]
    b = tiny_bench(tmp_path, methods, extra_seed_methods=[], tune_weights=[0.3, 1e39])
    res = run_table(b, make_scenario(b, "ext_class"))
    bad = next(h for h in res.heads if h["weight"] == 1e39)
    assert "non-finite" in bad["diverged"] and bad["val_p_up"] is None and not bad["chosen"]
    assert res.rows[0].weight == 0.3 and "1 diverged" in res.rows[0].selection
    assert "| diverged |" in write_table_report(res, CTX, tmp_path / "report").read_text()
    b2 = tiny_bench(tmp_path, methods, extra_seed_methods=[], tune_weights=[0.3, 1e39])
    again = run_table(b2, make_scenario(b2, "ext_class"))
    assert not any(m.strip().startswith("training") for m in b2.logs)  # type: ignore[attr-defined]
    assert "recorded in" in next(h for h in again.heads if h["weight"] == 1e39)["diverged"]


def test_kept_records_make_a_run_on_another_machine_train_only_the_old_models_and_references(tmp_path: Path):
    """A run with a records folder keeps one record per new model (diverged ones too); a run with an empty model cache
    and those records trains the old models and φ* again (their weights are needed) but no new model, and makes the
    same table. A record measured against parents whose embeddings have changed since says so in its row."""
    methods = [{"name": "bct", "method": "bct", "tune": True}, {"name": "psp", "method": "psp"}]
    kept = tmp_path / "records"
    first = tiny_bench(tmp_path / "a", methods, records=kept, tune_weights=[0.3, 1e39])
    expected = run_table(first, make_scenario(first, "ext_class"))
    # bct at λ 0.3 and 1e39 (diverged) at seed 0, at the chosen λ at seed 1
    assert len(RecordStore(kept)) == 3
    diverged = [json.loads(f.read_text()) for f in kept.glob("*.json") if json.loads(f.read_text())["diverged"]]
    assert len(diverged) == 1 and "non-finite" in diverged[0]["diverged"] and diverged[0]["test"] == {}

    other = tiny_bench(tmp_path / "b", methods, records=kept, tune_weights=[0.3, 1e39])
    got = run_table(other, make_scenario(other, "ext_class"))
    trained = [m.split(" (")[0].strip() for m in other.logs if m.strip().startswith("training")]  # type: ignore[attr-defined]
    assert trained and all(t.split()[1].startswith(("old/", "reference/")) for t in trained), trained
    assert [r.as_dict() for r in got.rows] == [r.as_dict() for r in expected.rows]
    assert got.heads == expected.heads
    assert not any(r.note.startswith("measured against") for r in got.rows)

    # the seed-1 record as if measured against other parents' embeddings (another torch): its row says so
    seed1 = next(f for f in kept.glob("*.json") if json.loads(f.read_text())["label"].endswith("seed=1"))
    body = json.loads(seed1.read_text())
    seed1.write_text(json.dumps(body | {"parents_digest": "0" * 16}))
    third = tiny_bench(tmp_path / "b", methods, records=kept, tune_weights=[0.3, 1e39])
    row = next(r for r in run_table(third, make_scenario(third, "ext_class")).rows if r.name == "bct" and r.seed == 1)
    assert row.note.startswith("measured against its old model and φ* as first trained (record 0000")


def test_records_hold_every_roles_training_and_an_older_record_gains_them_from_the_cache(tmp_path: Path):
    methods = [{"name": "bct", "method": "bct", "weight": 1.0}]
    b = tiny_bench(tmp_path, methods, records=tmp_path / "records", seeds=[0])
    row = run_table(b, make_scenario(b, "ext_class")).rows[0]
    (path,) = (tmp_path / "records").glob("*.json")
    rec = json.loads(path.read_text())
    for role, label in (
        ("old", "old/euclidean/seed=0"),
        ("ref", "reference/euclidean/seed=0"),
        ("new", "bct/λ=1/seed=0"),
    ):
        (done,) = [
            d for d in (tmp_path / "cache" / "cache").glob("*/done.json") if json.loads(d.read_text())["label"] == label
        ]
        meta = json.loads(done.read_text())
        per_epoch = meta["n_train"] // 128 if meta["n_train"] > 128 else 1
        assert rec["roles"][role] == {"train_accuracy": meta["history"][-1]["train_accuracy"], "epochs": 1,
                                      "steps": per_epoch, "n_train": meta["n_train"]}  # fmt: skip
    assert row.roles == rec["roles"]
    path.write_text(json.dumps({k: v for k, v in rec.items() if k != "roles"}))  # a record made before roles
    b = tiny_bench(tmp_path, methods, records=tmp_path / "records", seeds=[0])
    assert run_table(b, make_scenario(b, "ext_class")).rows[0].roles == rec["roles"]
    assert json.loads(path.read_text())["roles"] == rec["roles"]  # kept in the record
    assert not any(m.strip().startswith("training") for m in b.logs)  # type: ignore[attr-defined]
    # the new model gone from the cache (a table made in another workspace): its training is in the record's meta
    path.write_text(json.dumps({k: v for k, v in rec.items() if k != "roles"}))
    shutil.rmtree(
        next(d.parent for d in (tmp_path / "cache" / "cache").glob("*/done.json") if d.parent.name == rec["key"])
    )
    b = tiny_bench(tmp_path, methods, records=tmp_path / "records", seeds=[0])
    assert run_table(b, make_scenario(b, "ext_class")).rows[0].roles == rec["roles"]
    assert json.loads(path.read_text())["roles"] == rec["roles"]
    assert not any(m.strip().startswith("training") for m in b.logs)  # type: ignore[attr-defined]
