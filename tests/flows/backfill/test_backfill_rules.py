"""The backfill decision (docs/design.md §7.4): each rule by name from params, reasons in words, checks recorded; the
rules are a catalog, each registered under its field of ``backfill.rules``."""

from __future__ import annotations

import pytest

from components.evaluation import is_compatible
from flows.backfill.rules import RULES, SHARED, BackfillEvidence, decide_backfill, rule
from flows.params import BackfillRules, load_params
from flows.params.tags import Shapes, leaf_tags
from flows.pipeline.dvc_yaml import param_keys
from tests.conftest import REPO

LIVE_SELF = {"cmc@1": 0.80, "cmc@5": 0.93, "map": 0.60}


def evidence(metric: str = "map", **kw) -> BackfillEvidence:
    """Evidence whose measured compatibility fact is the criterion on ``metric`` (as the evaluation step measures)."""
    base = dict(
        live_generation_id=0,
        cross={"cmc@1": 0.82, "cmc@5": 0.95, "map": 0.70},
        live_self=LIVE_SELF,
        p_com={"cmc@1": 0.4, "map": 0.3},
        zeta=1.2,
        gallery_clip_fraction=0.5,
        generations_since_backfill=1,
    )
    base.update(kw)
    cross = base["cross"]
    base.setdefault("compatible", cross is not None and is_compatible(cross[metric], LIVE_SELF[metric]))
    return BackfillEvidence(**base)


def test_compatible_generation_needs_no_backfill():
    d = decide_backfill(evidence(), BackfillRules(p_com_floor=0.1))
    assert d.required is False and d.reasons == []
    assert {c["rule"] for c in d.checks} == {"compatibility", "p_com_floor", "zeta_ceiling", "clip_fraction_max"}
    assert all(c["passed"] for c in d.checks)
    assert d.against_generation_id == 0


def test_empirical_criterion_failure_is_a_reason_with_numbers():
    d = decide_backfill(evidence(cross={"cmc@1": 0.7, "cmc@5": 0.9, "map": 0.55}), BackfillRules())
    assert d.required
    assert "fails against live gallery generation 0" in d.reasons[0]
    assert "0.5500" in d.reasons[0] and "0.6000" in d.reasons[0]


def test_equal_cross_and_self_is_not_compatible():
    """The criterion is strict: M(new, old) > M(old, old)."""
    d = decide_backfill(evidence(cross={"cmc@1": 0.8, "cmc@5": 0.9, "map": 0.60}), BackfillRules())
    assert d.required


def test_metric_choice_is_honoured():
    cross = {"cmc@1": 0.7, "cmc@5": 0.9, "map": 0.65}  # worse CMC@1, better mAP
    assert decide_backfill(evidence("map", cross=cross), BackfillRules(metric="map")).required is False
    assert decide_backfill(evidence("cmc@1", cross=cross), BackfillRules(metric="cmc@1")).required is True


def test_p_com_floor_zeta_ceiling_generation_limit_and_clip_saturation():
    rules = BackfillRules(p_com_floor=0.5, zeta_ceiling=1.1, max_generations_since_backfill=0, clip_fraction_max=0.4)
    d = decide_backfill(evidence(), rules)
    failed = {c["rule"] for c in d.checks if not c["passed"]}
    assert failed == {"p_com_floor", "zeta_ceiling", "max_generations_since_backfill", "clip_fraction_max"}
    assert len(d.reasons) == 4
    assert any("no room left to encode confidence" in r for r in d.reasons)
    # each failed check says it in a few characters too: what the lineage picture prints under the box
    assert [c["short"] for c in d.checks if not c["passed"]] == [
        "P_com 0.30 < 0.50",
        "ζ 1.20 > 1.10",
        "1 gens since backfill > 0",
        "clip 50% > 40%",
    ]


def test_missing_reference_skips_p_com_rule_without_failing():
    d = decide_backfill(evidence(p_com={}), BackfillRules(p_com_floor=0.5))
    check = next(c for c in d.checks if c["rule"] == "p_com_floor")
    assert check["passed"] and "skipped" in check["detail"]


def test_disabled_rules_are_not_checked():
    d = decide_backfill(
        evidence(zeta=10.0, gallery_clip_fraction=1.0), BackfillRules(zeta_ceiling=None, clip_fraction_max=None)
    )
    assert not d.required
    assert {c["rule"] for c in d.checks} == {"compatibility"}


def test_gallery_the_model_cannot_query_requires_backfill():
    d = decide_backfill(
        evidence(cross=None, incompatibility="geometry euclidean vs lorentz"),
        BackfillRules(require_compatibility=False),
    )
    assert d.required and "cannot query generation 0" in d.reasons[0]
    assert d.checks[0]["short"] == "cannot query g0's gallery"


def test_rules_read_the_compatibility_fact_and_skip_it_when_not_required():
    incompatible = evidence(cross={"cmc@1": 0.7, "cmc@5": 0.9, "map": 0.55})
    assert incompatible.compatible is False
    off = decide_backfill(incompatible, BackfillRules(require_compatibility=False))
    assert not off.required and "compatibility" not in {c["rule"] for c in off.checks}
    on = decide_backfill(incompatible, BackfillRules(require_compatibility=True))
    assert on.required and on.checks[0] == {
        "rule": "compatibility",
        "value": 0.55,
        "threshold": 0.60,
        "passed": False,
        "detail": "empirical compatibility fails against live gallery generation 0: "
        "cross map 0.5500 ≤ its self map 0.6000",
        "short": "cross 0.550 ≤ old 0.600",
    }


def test_a_rule_is_its_function_and_its_field_and_nothing_else_lists_it():
    """Adding a rule = the function registered with @rule("<field>") + that field in BackfillRules (tagged like the
    others) + its line in params.yaml: the decision runs the catalog, and the field's tag makes it a parameter of an
    aligned generation's DVC stage (never generation 0's, which has no backfill decision)."""
    assert set(RULES) == set(BackfillRules.model_fields) - SHARED
    assert set(leaf_tags(BackfillRules, "backfill.rules").values()) == {Shapes("aligned")}
    params = load_params(REPO / "params.yaml")
    assert "backfill.rules" in param_keys(params, 1)
    assert not [k for k in param_keys(params, 0) if k.startswith("backfill")]
    enabled = BackfillRules(p_com_floor=0.1, max_generations_since_backfill=3)
    assert [c["rule"] for c in decide_backfill(evidence(), enabled).checks] == [
        "compatibility",
        "p_com_floor",
        "zeta_ceiling",
        "max_generations_since_backfill",
        "clip_fraction_max",
    ]


@pytest.mark.parametrize("field", ["no_such_field", "metric", "zeta_ceiling"])
def test_a_rule_must_name_its_own_field_of_backfill_rules(field: str):
    with pytest.raises(TypeError, match=f"names field '{field}': add that field to flows/params/schema.py Backfill"):
        rule(field)(lambda ev, rules: None)
    assert len(RULES) == len(BackfillRules.model_fields) - len(SHARED)  # nothing registered
