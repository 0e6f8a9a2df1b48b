"""The manifest stored beside every gallery index file (docs/design.md §7 "Index files").

FAISS itself detects neither a same-dimension model swap, a truncated file,
nor NaN vectors (docs/design.md §7), so each index carries a manifest that is checked
on load and at query time. Serialised as one JSON object in ``manifest.json``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from components.errors import IndexIntegrityError

__all__ = [
    "FORMAT_VERSION",
    "INDEX_TYPES",
    "IndexManifest",
    "utc_now_iso",
]

#: The manifest layout this code writes and reads.
FORMAT_VERSION = 1
#: Index layouts this code can build and load.
INDEX_TYPES: tuple[str, ...] = ("flat_ip",)
_GEOMETRIES = ("euclidean", "lorentz")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIX = "rebuild the index (GalleryIndex.build(...).save(...)) to get a valid manifest"


def utc_now_iso() -> str:
    """Current time as ISO-8601 UTC, e.g. ``2025-01-31T12:00:00.123456+00:00``."""
    return datetime.now(UTC).isoformat()


def _bad(name: str, why: str) -> IndexIntegrityError:
    return IndexIntegrityError(f"index manifest field {name!r} {why}; {_FIX}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class IndexManifest:
    """Metadata of one saved gallery index.

    ``dim`` is the stored vector width: d for euclidean, d+1 for lorentz
    (time first). ``checksum`` is the sha256 hex digest of the index file's
    bytes. ``compatible_generations`` lists the query generations allowed to
    search this index (defaults to ``(generation,)`` and always contains it).
    ``created_at`` is ISO-8601 UTC. Invalid values raise
    :class:`~components.errors.IndexIntegrityError` naming the field.
    """

    generation: int
    geometry: str
    curvature: float
    dim: int
    count: int
    checksum: str
    index_type: str = "flat_ip"
    compatible_generations: tuple[int, ...] = ()
    created_at: str = field(default_factory=utc_now_iso)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not _is_int(self.format_version) or self.format_version != FORMAT_VERSION:
            raise _bad(
                "format_version",
                f"is {self.format_version!r} but this code reads version {FORMAT_VERSION}",
            )
        if not _is_int(self.generation) or self.generation < 0:
            raise _bad("generation", f"must be an int >= 0, got {self.generation!r}")
        if self.geometry not in _GEOMETRIES:
            raise _bad("geometry", f"must be one of {_GEOMETRIES}, got {self.geometry!r}")
        if (
            not isinstance(self.curvature, (int, float))
            or isinstance(self.curvature, bool)
            or not math.isfinite(self.curvature)
            or self.curvature <= 0
        ):
            raise _bad("curvature", f"must be a finite number > 0, got {self.curvature!r}")
        object.__setattr__(self, "curvature", float(self.curvature))
        min_dim = 2 if self.geometry == "lorentz" else 1
        if not _is_int(self.dim) or self.dim < min_dim:
            raise _bad("dim", f"must be an int >= {min_dim} for {self.geometry}, got {self.dim!r}")
        if not _is_int(self.count) or self.count < 1:
            raise _bad("count", f"must be an int >= 1, got {self.count!r}")
        if not isinstance(self.checksum, str) or not _SHA256.match(self.checksum):
            raise _bad("checksum", f"must be a lowercase sha256 hex digest, got {self.checksum!r}")
        if self.index_type not in INDEX_TYPES:
            raise _bad("index_type", f"must be one of {INDEX_TYPES}, got {self.index_type!r}")
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (compatible_generations as a list)."""
        d = asdict(self)
        d["compatible_generations"] = list(self.compatible_generations)
        return d

    def to_json(self) -> str:
        """Pretty JSON text with sorted keys, ending in a newline."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: Any) -> IndexManifest:
        """Validate and build from a dict; missing/unknown fields are named in the error."""
        if not isinstance(d, dict):
            raise IndexIntegrityError(f"index manifest must be a JSON object, got {type(d).__name__}; {_FIX}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise IndexIntegrityError(f"index manifest is missing field(s) {', '.join(missing)}; {_FIX}")
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise IndexIntegrityError(
                f"index manifest has unknown field(s) {', '.join(unknown)} (written by a newer bctflow?); {_FIX}"
            )
        kwargs = dict(d)
        gens = kwargs["compatible_generations"]
        if isinstance(gens, list):
            kwargs["compatible_generations"] = tuple(gens)
        elif not isinstance(gens, tuple):
            raise _bad("compatible_generations", f"must be a list of ints, got {gens!r}")
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> IndexManifest:
        """Parse JSON text; malformed JSON raises IndexIntegrityError."""
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise IndexIntegrityError(f"index manifest is not valid JSON ({e}); {_FIX}") from e
        return cls.from_dict(d)
