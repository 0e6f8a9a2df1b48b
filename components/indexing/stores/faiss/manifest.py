"""The FAISS files' manifest, stored beside every gallery index file (docs/design.md §7.8 "Index files"): the
:class:`~components.indexing.manifest.GalleryManifest` every store records, with the index file's checksums.

FAISS itself detects neither a same-dimension model swap, a truncated file,
nor NaN vectors (docs/design.md §7), so each index carries a manifest that is checked
on load and at query time. Serialised as one JSON object in ``manifest.json``.

Format version 2 adds the index type and its build record: ``factory`` (the
``faiss.index_factory`` string), ``params`` (parameters actually used), the recall@10
measured against exact search at build time, the build time, the measured queries/s
and, for sharded indexes, one sha256 per shard file. Version-1 manifests (always an
exact ``flat_ip`` index) still load: :meth:`IndexManifest.from_dict` upgrades them to
version 2 (``index_type`` ``flat``); saving the index again writes version 2.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from components.errors import IndexIntegrityError
from components.geometry import list_spaces
from components.indexing.manifest import GalleryManifest

__all__ = [
    "FORMAT_VERSION",
    "INDEX_TYPES",
    "IVF_TYPES",
    "QUANTIZED_TYPES",
    "IndexManifest",
    "shards_digest",
    "utc_now_iso",
]

#: The manifest layout this code writes (it also reads version 1).
FORMAT_VERSION = 2
#: Index layouts this code can build and load (version-1 ``flat_ip`` reads as ``flat``).
INDEX_TYPES: tuple[str, ...] = ("flat", "ivf", "hnsw", "ivfpq", "ivfsq")
#: The types over inverted lists (a trained coarse quantizer, ``nlist`` / ``nprobe``, a direct map for re-scoring).
IVF_TYPES: tuple[str, ...] = ("ivf", "ivfpq", "ivfsq")
#: The types that store codes, not rows: what they give back is decoded, so approximate.
QUANTIZED_TYPES: tuple[str, ...] = ("ivfpq", "ivfsq")
#: Parameters each index type must record (ints >= 1).
REQUIRED_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "ivf": ("nlist", "nprobe"),
    "hnsw": ("hnsw_m", "ef_search"),
    "ivfpq": ("nlist", "nprobe", "pq_m", "pq_nbits"),
    "ivfsq": ("nlist", "nprobe"),
}
METRICS = ("inner_product", "l2")
_V1_FIELDS = (
    *("generation", "geometry", "curvature", "dim", "count", "checksum", "index_type"),
    *("compatible_generations", "created_at", "format_version"),
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIX = "rebuild the index (GalleryIndex.build(...).save(...)) to get a valid manifest"


def utc_now_iso() -> str:
    """Current time as ISO-8601 UTC, e.g. ``2025-01-31T12:00:00.123456+00:00``."""
    return datetime.now(UTC).isoformat()


def shards_digest(shard_checksums: tuple[str, ...] | list[str]) -> str:
    """The manifest ``checksum`` of a sharded index: sha256 of its shard files' hex digests joined by newlines."""
    return hashlib.sha256("\n".join(shard_checksums).encode("ascii")).hexdigest()


def _bad(name: str, why: str) -> IndexIntegrityError:
    return IndexIntegrityError(f"index manifest field {name!r} {why}; {_FIX}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True, kw_only=True)
class IndexManifest(GalleryManifest):
    """Metadata of one saved gallery index (the fields of :class:`GalleryManifest`, and the FAISS file's own).

    ``dim`` is the retrieval vector width: d for euclidean, d+1 for lorentz
    (time first); the FAISS index may store wider rows (``params["stored_dim"]``).
    ``checksum`` is the sha256 hex digest of the index file's bytes, or for a
    sharded index (``shard_checksums`` = one digest per shard file, >= 2) the
    :func:`shards_digest` of those. ``index_type`` is one of :data:`INDEX_TYPES`,
    ``factory`` the ``faiss.index_factory`` string built, ``params`` the parameters
    used (JSON scalars; e.g. ``metric``, ``stored_dim``, ``nlist``, ``nprobe``,
    ``ef_search``, see :data:`REQUIRED_PARAMS`). ``recall_at_10`` is the recall@10
    against exact search measured at build time on ``recall_queries`` held-out
    gallery items (1.0 for flat, exact by construction; None if unknown),
    ``build_seconds`` the build wall time and ``search_qps`` the queries/s of
    ``GalleryIndex.search`` (FAISS + float64 re-scoring) measured in one call on those
    queries (None if unknown). ``compatible_generations`` lists
    the query generations allowed to search this index (defaults to
    ``(generation,)`` and always contains it). ``created_at`` is ISO-8601 UTC.
    Invalid values raise :class:`~components.errors.IndexIntegrityError` naming the field.
    """

    checksum: str
    index_type: str = "flat"
    factory: str = "IDMap2,Flat"
    recall_at_10: float | None = 1.0
    shard_checksums: tuple[str, ...] = ()
    created_at: str = field(default_factory=utc_now_iso)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not _is_int(self.format_version) or self.format_version != FORMAT_VERSION:
            raise _bad(
                "format_version",
                f"is {self.format_version!r} but this code writes version {FORMAT_VERSION} (and reads 1 and 2)",
            )
        if not _is_int(self.generation) or self.generation < 0:
            raise _bad("generation", f"must be an int >= 0, got {self.generation!r}")
        if self.geometry not in list_spaces():
            raise _bad("geometry", f"must be one of {tuple(list_spaces())}, got {self.geometry!r}")
        if not _is_number(self.curvature) or self.curvature <= 0:
            raise _bad("curvature", f"must be a finite number > 0, got {self.curvature!r}")
        object.__setattr__(self, "curvature", float(self.curvature))
        min_dim = self.space.min_width
        if not _is_int(self.dim) or self.dim < min_dim:
            raise _bad("dim", f"must be an int >= {min_dim} for {self.geometry}, got {self.dim!r}")
        if not _is_int(self.count) or self.count < 1:
            raise _bad("count", f"must be an int >= 1, got {self.count!r}")
        if not isinstance(self.checksum, str) or not _SHA256.match(self.checksum):
            raise _bad("checksum", f"must be a lowercase sha256 hex digest, got {self.checksum!r}")
        if self.index_type not in INDEX_TYPES:
            raise _bad("index_type", f"must be one of {INDEX_TYPES}, got {self.index_type!r}")
        if not isinstance(self.factory, str) or not self.factory.startswith("IDMap2,"):
            raise _bad("factory", f"must be a FAISS index_factory string starting 'IDMap2,', got {self.factory!r}")
        self._check_params()
        self._check_build_record()
        shards = self.shard_checksums
        if not isinstance(shards, (tuple, list)) or not all(isinstance(s, str) and _SHA256.match(s) for s in shards):
            raise _bad("shard_checksums", f"must be a list of sha256 hex digests, got {shards!r}")
        if len(shards) == 1:
            raise _bad("shard_checksums", "must be empty (one index file) or list >= 2 shard files")
        object.__setattr__(self, "shard_checksums", tuple(shards))
        if shards and self.checksum != shards_digest(shards):
            raise _bad("checksum", "is not the digest of shard_checksums (the manifest was edited)")
        if self.params.get("shards", 1) != max(1, len(shards)):
            raise _bad("params", f"says shards={self.params.get('shards')} but lists {len(shards)} shard checksums")
        gens = self.compatible_generations
        if not isinstance(gens, (tuple, list)) or not all(_is_int(g) and g >= 0 for g in gens):
            raise _bad("compatible_generations", f"must be a list of ints >= 0, got {gens!r}")
        gens = tuple(gens) or (self.generation,)
        if self.generation not in gens:
            raise _bad(
                "compatible_generations",
                f"{gens!r} must include the index's own generation {self.generation}",
            )
        object.__setattr__(self, "compatible_generations", tuple(sorted(set(gens))))
        try:
            ts = datetime.fromisoformat(self.created_at) if isinstance(self.created_at, str) else None
        except ValueError:
            ts = None
        if ts is None or ts.utcoffset() is None or ts.utcoffset().total_seconds() != 0:
            raise _bad("created_at", f"must be an ISO-8601 UTC timestamp, got {self.created_at!r}")

    def _check_params(self) -> None:
        p = self.params
        if not isinstance(p, dict) or not all(isinstance(k, str) for k in p):
            raise _bad("params", f"must be a JSON object with string keys, got {p!r}")
        for k, v in p.items():
            if not (v is None or isinstance(v, (str, bool)) or _is_number(v)):
                raise _bad("params", f"value of {k!r} must be a JSON scalar, got {v!r}")
        for k in REQUIRED_PARAMS[self.index_type]:
            if not _is_int(p.get(k)) or p[k] < 1:
                raise _bad("params", f"must record {k!r} as an int >= 1 for index_type {self.index_type!r}")
        if p.get("metric", "inner_product") not in METRICS:
            raise _bad("params", f"metric must be one of {METRICS}, got {p.get('metric')!r}")
        if not _is_int(p.get("stored_dim", self.dim)) or p.get("stored_dim", self.dim) < self.dim:
            raise _bad("params", f"stored_dim must be an int >= dim {self.dim}, got {p.get('stored_dim')!r}")
        form = p.get("lorentz_form")
        if form is not None and (not self.space.indefinite or self.index_type == "flat"):
            raise _bad("params", f"lorentz_form {form!r} applies to approximate lorentz indexes only")
        needs = {"proxy": ("time_scale", "rerank"), "mips_l2": ("l2_radius",), None: ()}.get(form)
        if needs is None:
            raise _bad("params", f"lorentz_form must be 'proxy' or 'mips_l2', got {form!r}")
        for k in needs:
            if not _is_number(p.get(k)) or p[k] <= 0 or (k == "rerank" and not _is_int(p[k])):
                raise _bad("params", f"must record {k!r} (a number > 0) for lorentz_form {form!r}, got {p.get(k)!r}")
        if not _is_int(p.get("shards", 1)) or p.get("shards", 1) < 1:
            raise _bad("params", f"shards must be an int >= 1, got {p.get('shards')!r}")
        object.__setattr__(self, "params", dict(sorted(p.items())))

    def _check_build_record(self) -> None:
        r = self.recall_at_10
        if r is not None and (not _is_number(r) or not 0.0 <= r <= 1.0):
            raise _bad("recall_at_10", f"must be a number in [0, 1] or null, got {r!r}")
        if self.index_type == "flat" and r not in (None, 1.0):
            raise _bad("recall_at_10", f"must be 1.0 (or null) for the exact flat index, got {r!r}")
        object.__setattr__(self, "recall_at_10", None if r is None else float(r))
        if not _is_int(self.recall_queries) or self.recall_queries < 0:
            raise _bad("recall_queries", f"must be an int >= 0, got {self.recall_queries!r}")
        for name in ("build_seconds", "search_qps"):
            v = getattr(self, name)
            if v is not None and (not _is_number(v) or v < 0 or (name == "search_qps" and v == 0)):
                raise _bad(
                    name, f"must be a finite number {'> 0' if name == 'search_qps' else '>= 0'} or null, got {v!r}"
                )
            object.__setattr__(self, name, None if v is None else float(v))

    # ------------------------------------------------------------- derived
    @property
    def metric(self) -> str:
        """FAISS metric of the stored rows: ``inner_product`` or ``l2``."""
        return str(self.params.get("metric", "inner_product"))

    @property
    def stored_dim(self) -> int:
        """Width of the rows FAISS stores (``dim``, or ``dim + 1`` for the Lorentz L2 reduction)."""
        return int(self.params.get("stored_dim", self.dim))

    @property
    def shards(self) -> int:
        """Number of index files (shards)."""
        return max(1, len(self.shard_checksums))

    # ------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists)."""
        d = asdict(self)
        d["compatible_generations"] = list(self.compatible_generations)
        d["shard_checksums"] = list(self.shard_checksums)
        d["params"] = dict(self.params)
        return d

    def to_json(self) -> str:
        """Pretty JSON text with sorted keys, ending in a newline."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: Any) -> IndexManifest:
        """Validate and build from a dict; missing/unknown fields are named in the error.

        A version-1 dict (exact ``flat_ip`` index) is upgraded to version 2:
        ``index_type`` ``flat``, ``factory`` ``IDMap2,Flat``, recall 1.0, no build record.
        """
        if not isinstance(d, dict):
            raise IndexIntegrityError(f"index manifest must be a JSON object, got {type(d).__name__}; {_FIX}")
        version = d.get("format_version")
        names = _V1_FIELDS if version == 1 else [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise IndexIntegrityError(f"index manifest is missing field(s) {', '.join(missing)}; {_FIX}")
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise IndexIntegrityError(
                f"index manifest has unknown field(s) {', '.join(unknown)} (written by a newer bctflow?); {_FIX}"
            )
        kwargs = dict(d)
        if version == 1:
            if kwargs["index_type"] != "flat_ip":
                raise _bad("index_type", f"must be 'flat_ip' in a version-1 manifest, got {kwargs['index_type']!r}")
            kwargs.update(index_type="flat", format_version=FORMAT_VERSION, recall_at_10=1.0)
            if _is_int(kwargs["dim"]):
                kwargs["params"] = {"metric": "inner_product", "stored_dim": kwargs["dim"], "shards": 1}
        for name in ("compatible_generations", "shard_checksums"):
            value = kwargs.get(name, [])
            if isinstance(value, list):
                kwargs[name] = tuple(value)
            elif not isinstance(value, tuple):
                raise _bad(name, f"must be a list, got {value!r}")
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> IndexManifest:
        """Parse JSON text; malformed JSON raises IndexIntegrityError."""
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise IndexIntegrityError(f"index manifest is not valid JSON ({e}); {_FIX}") from e
        return cls.from_dict(d)
