"""docs/lineage-json.md, generated: the schema of ``bctflow lineage --json`` (registry/lineage_json.py writes the
document, its roles — live gallery, production, promoted — read from the lineage timeline, registry/timeline.py).

:data:`FIELDS` describes every key the document has, in the order the code writes them; :func:`lineage_json_doc`
renders the page from it. tests/registry/test_lineage_json_doc.py checks both ways, so the page cannot drift: the
committed page is what this module renders, and the keys a real lineage's document has are exactly the keys
:data:`FIELDS` describes (:func:`emitted_keys` against :func:`documented_keys`). A new key in the document is a new
row here, then ``python -m registry.lineage_json_doc`` (run from the repository root) writes the page again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["DOC", "FIELDS", "Field", "documented_keys", "emitted_keys", "lineage_json_doc", "write_doc"]

#: the page, relative to the repository root
DOC = Path("docs") / "lineage-json.md"


@dataclass(frozen=True)
class Field:
    """One key of a generation's object (``metrics.self``: the key ``self`` of its ``metrics`` object).

    ``keys``: the keys of the object the value is (``shape="object"``), of every item of the list it is
    (``"items"``) or of every value of the mapping it is (``"values"``, e.g. one object per metric); checked against
    the document like the key itself and listed in the page."""

    key: str
    type: str
    meaning: str
    keys: tuple[str, ...] = ()
    shape: Literal["object", "items", "values"] = "object"


_RETRIEVAL = "{`cmc@1`, `cmc@5`, `map`}"
_PER_METRIC = "{`cmc@1`, `map`}"

FIELDS: tuple[Field, ...] = (
    Field("id", "int", "generation id (0, 1, …)"),
    Field("name", "str", "generation name (`g0`, or the name params.yaml `generations:` gives it)"),
    Field("parent", "int \\| null", "the generation it was aligned to (the live gallery's generation); null for 0"),
    Field("status", "str", "`serving`, or `retired` after a full backfill with a newer generation"),
    Field("live", "bool", "this generation embedded the live gallery"),
    Field(
        "live_gallery",
        "object \\| null",
        "where the live gallery's vectors live, as its newest pointer row recorded them (on the live generation only; "
        "null elsewhere): `store` (`gallery.store`), `collection` (the store's collection / table; null for FAISS "
        'files), `rows_by_generation` (`{"<gen id>": rows}` as written; `bctflow doctor` compares it with the '
        "store), `index_params` (`{index_type, …its parameters}`), `switched_at` (ISO-8601 UTC); each null when "
        "recorded before lineage revision 0007",
        keys=("store", "collection", "rows_by_generation", "index_params", "switched_at"),
    ),
    Field("live_gallery_accepts_queries", "bool", "the live gallery accepts this generation's queries"),
    Field(
        "compatible_with_live",
        "bool \\| null",
        "the measured fact: cross(new, live gallery) > self(live gallery) on `backfill.rules.metric`, recorded "
        "whatever rules are enabled (null: recorded before lineage schema v3)",
    ),
    Field("promoted", "bool", "passed the promotion gate, or was promoted by hand (`bctflow promote`)"),
    Field("production", "bool", "holds the `production` alias now (the latest promotion's generation)"),
    Field(
        "promotions",
        "[object]",
        "every promotion of this generation",
        keys=("forced", "by", "reason", "at"),
        shape="items",
    ),
    Field(
        "backfills",
        "[object]",
        "the backfills *with* this generation (`from`: the generation whose gallery it re-embedded; `kind` `full`, "
        "`partial`, or `transform`: the stored vectors carried by a transform bridge, which `metrics` names by "
        "`bridge_id`, `bridge_version` and `bridge_sha256`)",
        keys=(
            "id",
            "kind",
            "from",
            "fraction",
            "order",
            "total",
            "reembedded",
            "zeta_restarted",
            "duration_s",
            "metrics",
            "finished_at",
        ),
        shape="items",
    ),
    Field(
        "bridges",
        "[object]",
        "the fitted maps *from* this generation's space (lineage revision 0008; docs/design.md §11): `to` the "
        "generation whose space it maps into, `role` `adapter` (this generation's queries into its parent's "
        "gallery space) or `transform` (stored vectors into a newer generation's space), the map's `kind`, its "
        "`version` (each fit of one (to, role) the next), the `sha256` of its file at `path`, the paired `sample` "
        "and held-out `fit_error`, and its MLflow model version once registered",
        keys=("to", "role", "kind", "version", "sha256", "sample", "fit_error", "mlflow_version", "path"),
        shape="items",
    ),
    Field(
        "route_choices",
        "[object]",
        "the upgrade routes a rule took for this generation (lineage revision 0009; `bctflow upgrade --route "
        "auto|compatible|backfill`, docs/design.md §11), the newest last: `from` the generation whose gallery the "
        "route starts from, the `route` taken, the `rule` (`auto` or the route the user set), the bar `min_map` and "
        "whether the route `met_bar`, the one `line` that says why, every route's measurement (`evidence`: route, "
        "served_map, seconds_per_item, query_us) and when (`at`)",
        keys=("from", "route", "rule", "min_map", "met_bar", "line", "evidence", "at"),
        shape="items",
    ),
    Field(
        "nights",
        "[object]",
        "the lifecycle's nights that trained this generation (or, training nothing, started from it as production; "
        "lineage revision 0010; `lifecycle.policy`, docs/design.md §7.18), oldest first: the `night`'s name, the "
        "`policy`, the `action` taken (keep, promote, adapter, transform, partial, full, begin, continue) with its "
        "`fraction` and `target` generation, the one-line `reason`, the `forecast_map` it chose by and "
        "`served_before` it (today's served mAP), the `outcome_map` measured the night after, its `state` (decided, "
        "acting, done), the `items` it re-embedded and `compute_s` it spent, the `backfill` event it made and what it "
        "`carry`-ies to the next nights",
        keys=(
            "night",
            "policy",
            "action",
            "fraction",
            "target",
            "reason",
            "forecast_map",
            "served_before",
            "outcome_map",
            "state",
            "items",
            "compute_s",
            "backfill",
            "carry",
        ),
        shape="items",
    ),
    Field(
        "compatibility",
        "object \\| null",
        "the compatibility matrix over the serving generations as of this generation, one object per metric "
        "(`matrix[t][k]`: queries of `generations[t]` on the gallery of `generations[k]`)",
        keys=("generations", "matrix", "ac", "aa", "aca"),
        shape="values",
    ),
    Field("alignment", "str", "alignment method (`independent`, `bct`, `hbct`, …)"),
    Field("geometry", "str", "`lorentz` \\| `euclidean`"),
    Field("zeta", "float \\| null", "clip radius ζ (null for Euclidean models)"),
    Field("zeta_step", "object \\| null", "how ζ was set: the ζ lineage", keys=("parent_zeta", "delta", "restarted")),
    Field("curvature", "float", "K (the space has curvature −K)"),
    Field("embed_dim", "int", "embedding width"),
    Field("dataset", "str", "the dataset it trained on (`data.dataset`)"),
    Field("data_hash", "str", "DVC md5 of the generation's data manifest"),
    Field("class_order", "[int]", "the classes it trained on, in the order its classifier numbers them"),
    Field("architecture", "object", "the model spec (backbone, head, widths)"),
    Field("hyperparameters", "object", "the training settings it ran with"),
    Field("checkpoint", "str", "path of `model.pt`"),
    Field(
        "checkpoint_sha256",
        "str \\| null",
        "sha256 of the checkpoint (null before lineage revision 0002); a parent whose file differs is refused",
    ),
    Field(
        "code_digest",
        "str \\| null",
        "sha256 of the model-shaping code that trained it (components/code_digest.py; null before lineage revision "
        "0004); the nightly check retrains when it changes",
    ),
    Field("index", "str", "path of its index folder (FAISS files, or the attachment naming its collection / table)"),
    Field("mlflow_model", "str \\| null", "the registered model's name"),
    Field("mlflow_version", "str \\| null", "its version of that model"),
    Field("mlflow_run_id", "str \\| null", "the generation's MLflow run"),
    Field("created_at", "str", "ISO-8601 UTC"),
    Field("backfill_required", "bool \\| null", "the backfill decision (null for generation 0)"),
    Field("backfill_reasons", "[str]", "why, in words (empty when not required)"),
    Field("backfill_checks", "[object]", "every rule: `{rule, value, threshold, passed, detail}`"),
    Field("backfill_against", "int \\| null", "the live gallery's generation the rules were checked against"),
    Field(
        "backfill_done",
        "int \\| null",
        "the id of the newest backfill that put the whole live gallery in this generation's embeddings (a full "
        "backfill or a gallery transform; a partial one does not count): a required backfill is done and its "
        "reasons stay as warnings (null: none)",
    ),
    Field(
        "diagnostics",
        "object",
        "Lorentz health signals (`clip_fraction_gallery`, `clip_fraction_train`, `clip_fraction_gallery_parent`, "
        "`clip_fraction_train_parent`, `uncertainty_gallery_seen/unseen`, `uncertainty_parent_seen/unseen`) and the "
        "method's own (HBCT: `in_cone_fraction`, `entail_angle_deg`, `aperture_deg`)",
    ),
    Field("metrics", "object", "retrieval and compatibility numbers: the keys `metrics.*` below"),
    Field("metrics.self", _RETRIEVAL, "M(φ_new, φ_new): its queries on its own gallery"),
    Field("metrics.cross", f"{_RETRIEVAL} \\| null", "M(φ_new, φ_live): its queries on the live gallery"),
    Field(
        "metrics.parent_self",
        f"{_RETRIEVAL} \\| null",
        "M(φ_live, φ_live) (old-old) on the live gallery the generation was checked against",
    ),
    Field("metrics.p_com", f"{_PER_METRIC} \\| null", "P_com (docs/design.md §6.3); null without a reference"),
    Field("metrics.p_com_denominator", f"{_PER_METRIC} \\| null", "M(φ*, φ*) − M(φ_old, φ_old): P_com's denominator"),
    Field("metrics.p_up", f"{_PER_METRIC} \\| null", "P_up (docs/design.md §6.3); null without a reference"),
    Field(
        "metrics.reference",
        "object \\| null",
        "the independent reference φ*: its own retrieval and its cross against the parent",
        keys=("self", "cross"),
    ),
    Field("metrics.against", f'{{"<gen id>": {_RETRIEVAL}}}', "cross retrieval against every serving generation"),
)

_HEADER = """\
# `bctflow lineage --json`

<!-- GENERATED by `python -m registry.lineage_json_doc` from registry/lineage_json_doc.py, whose FIELDS
tests/registry/test_lineage_json_doc.py checks against the document registry/lineage_json.py writes; do not edit
this page: edit FIELDS and run that command again. -->

`bctflow lineage --home .bctflow --json` prints the lineage as a JSON array, one object per generation, ordered by
id (`registry/lineage_json.py`; who is live, production and promoted comes from the lineage timeline,
`registry/timeline.py`, the same one the lineage picture draws). For example, each generation's decision:

```bash
bctflow lineage --home .bctflow --json | python3 -c 'import json, sys
for g in json.load(sys.stdin): print(g["name"], g["zeta"], g["backfill_required"], g["backfill_reasons"])'
```
"""

_FOOTER = """
All retrieval numbers: query set = gallery set = the test split, each query excluded from its own gallery by id
(leave-one-out), cosine for Euclidean models, geodesic distance for Lorentz models, computed in float64. The terms
are in the [glossary](glossary.md).
"""


def _row(f: Field, key: str) -> str:
    meaning = f.meaning
    if f.keys:
        each = {"object": "", "items": "each ", "values": "each "}[f.shape]
        meaning += f"; {each}`{{{', '.join(f.keys)}}}`"
    return f"| `{key}` | {f.type} | {meaning} |"


def lineage_json_doc() -> str:
    """The text of docs/lineage-json.md."""
    top = [f for f in FIELDS if "." not in f.key]
    nested = [f for f in FIELDS if f.key.startswith("metrics.")]
    lines = [_HEADER, "| key | type | meaning |", "| --- | --- | --- |", *(_row(f, f.key) for f in top)]
    lines += ["", "### `metrics`", "", "| key | type | meaning |", "| --- | --- | --- |"]
    lines += [_row(f, f.key) for f in nested]
    return "\n".join(lines) + "\n" + _FOOTER


def documented_keys() -> list[str]:
    """Every key :data:`FIELDS` describes, sub-keys as ``key/sub`` (``promotions/by``), in order."""
    return [k for f in FIELDS for k in (f.key, *(f"{f.key}/{s}" for s in f.keys))]


def _objects(value: Any, shape: str) -> list[dict[str, Any]]:
    if shape == "items":
        return [v for v in value or [] if isinstance(v, dict)]
    if shape == "values":
        return [v for v in (value or {}).values() if isinstance(v, dict)]
    return [value] if isinstance(value, dict) else []


def emitted_keys(document: list[dict[str, Any]]) -> list[str]:
    """The keys ``document`` (a ``bctflow lineage --json`` array) has, named as :func:`documented_keys` names them:
    top-level and ``metrics.*`` keys in the order the first generation has them, the sub-keys of the fields whose
    :attr:`Field.keys` the page lists as found in any generation (a sub-object that is null everywhere adds none)."""
    described = {f.key: f for f in FIELDS}
    found: dict[str, None] = {}
    for gen in document:
        flat = {**gen, **{f"metrics.{k}": v for k, v in (gen.get("metrics") or {}).items()}}
        for key, value in flat.items():
            found[key] = None
            field = described.get(key)
            if field is not None and field.keys:
                for obj in _objects(value, field.shape):
                    found.update({f"{key}/{sub}": None for sub in obj})
    return list(found)


def write_doc(root: Path) -> Path:
    """Write :func:`lineage_json_doc` to ``root``/docs/lineage-json.md; its path."""
    from components.io import atomic_write_text

    path = root / DOC
    atomic_write_text(path, lineage_json_doc())
    return path


if __name__ == "__main__":
    print(f"wrote {write_doc(Path.cwd())}")
