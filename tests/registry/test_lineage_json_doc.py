"""docs/lineage-json.md is generated (registry/lineage_json_doc.py) and cannot drift: the committed page is what the
generator renders, and the keys it documents are exactly the keys of a real lineage's `bctflow lineage --json`."""

from __future__ import annotations

from pathlib import Path

from registry.lineage_json_doc import DOC, documented_keys, emitted_keys, lineage_json_doc
from registry.records import (
    BridgeRecord,
    CompatRecord,
    DecisionRecord,
    EvaluationRecord,
    GenerationBundle,
    NightRecord,
    RouteChoiceRecord,
    ZetaRecord,
)
from tests.conftest import REPO
from tests.helpers import generation_record, lineage_story

REGENERATE = "run `python -m registry.lineage_json_doc` from the repository root"


def test_the_committed_page_is_what_the_generator_renders():
    assert (REPO / DOC).read_text() == lineage_json_doc(), f"docs/lineage-json.md is out of date: {REGENERATE}"


def _every_kind_of_value(path: Path) -> list[dict]:
    """The document of a lineage where every optional block is filled: promotions (one forced), a full backfill with
    a ζ restart, and a generation with a ζ step, a reference φ*, a backfill decision, a compatibility matrix and a
    bridge."""
    with lineage_story(path) as store:
        g3 = generation_record(3, 2, alignment="hbct", zeta=1.4, mlflow_version="4", mlflow_run_id="run3")
        g3.compatible_with_live = True
        evaluations = [
            EvaluationRecord(3, 3, "map", 0.9),
            EvaluationRecord(3, 2, "map", 0.6),
            EvaluationRecord(3, 3, "map", 0.95, query_role="reference", gallery_role="reference"),
            EvaluationRecord(3, 2, "map", 0.1, query_role="reference"),
        ]
        matrix = [[0.5, None], [0.6, 0.9]]
        store.commit_generation(
            GenerationBundle(
                g3,
                evaluations=evaluations,
                derived={"p_com/map": 0.2, "p_up/map": -0.05, "p_com_denominator/map": 0.4},
                diagnostics={"clip_fraction_gallery": 0.99},
                zeta=ZetaRecord(parent_zeta=1.2, delta=0.2, zeta=1.4),
                decision=DecisionRecord(True, ["99% on the clip radius"], [{"rule": "clip_fraction_max"}], 2),
                compat=[CompatRecord("map", [2, 3], matrix, ac=0.6, aa=0.7, aca=0.6)],
            )
        )
        store.record_bridge(BridgeRecord(3, 2, "adapter", "procrustes", str(path.parent / "b.npz"), "a" * 64, 99, 0.1))
        evidence = [{"route": "adapter", "served_map": 0.5, "seconds_per_item": 0.0, "query_us": 2.0}]
        choice = RouteChoiceRecord(3, 2, "adapter", "auto", 0.4, True, "upgrade route adapter", evidence)
        store.record_route_choice(choice)
        night = NightRecord("night-03", "budget", 3, 2, 2, "partial", 0.3, 3, "the best forecast within the budget",
                            0.61, 0.5, [{"action": "keep"}], [{"rule": "clip_fraction_max"}])  # fmt: skip
        store.nights.decide(night)
        store.nights.done("night-03", items=300, compute_s=12.0, carry={"target": 3, "mode": "partial"})
        return store.to_json()


def test_the_page_documents_exactly_the_keys_a_lineage_document_has(tmp_path: Path):
    document = _every_kind_of_value(tmp_path / "lineage.db")
    last = document[-1]
    assert last["zeta_step"] and last["compatibility"] and last["metrics"]["reference"] and last["metrics"]["p_com"]
    assert document[0]["promotions"] and document[1]["backfills"] and last["bridges"] and last["route_choices"]
    assert last["nights"] and last["nights"][0]["state"] == "done"
    emitted, documented = emitted_keys(document), documented_keys()
    undocumented = [k for k in emitted if k not in documented]
    stale = [k for k in documented if k not in emitted]
    assert not undocumented and not stale, (
        f"registry/lineage_json_doc.py FIELDS does not match the document registry/lineage_json.py writes: "
        f"not documented {undocumented}, documented but not written {stale}; edit FIELDS, then {REGENERATE}"
    )
    top = [k for k in emitted if "/" not in k]
    assert top == [k for k in documented if "/" not in k], "FIELDS lists the keys in the order the document has them"


def test_a_key_the_page_does_not_describe_is_found():
    """The check can fail: a document with a key no Field describes, or without one it describes."""
    entry = {f: None for f in documented_keys() if "." not in f and "/" not in f} | {"metrics": {}, "new_key": 1}
    assert "new_key" in emitted_keys([entry]) and "metrics.self" not in emitted_keys([entry])
