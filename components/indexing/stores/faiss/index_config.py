"""Which FAISS index a gallery gets, and its parameters (docs/design.md §8.2, §8.3).

:class:`IndexConfig` is the frozen, validated choice of index type (``flat`` exact;
``ivf``, ``hnsw``, ``ivfpq`` and ``ivfsq`` approximate) with the knobs FAISS needs to build and
search it. It resolves data-dependent defaults (``nlist``, ``pq_m``) once the gallery
size and stored width are known and names the ``faiss.index_factory`` string that is
actually built (:meth:`IndexConfig.factory_string`), which the manifest records.

Defaults: nlist ≈ 4·sqrt(N), hnsw_m 32, rerank 3; nprobe 16 / ef_search 96 are the search
effort when ``target_recall`` is None — with it (params default 0.95) the build picks the
cheapest effort that reaches it (:mod:`components.indexing.stores.faiss.tuning`). Measured on the scale
corpora (``bctflow bench scale``, benchmarks/results/scale/): see the reports there. Every
build measures its own recall against exact search and records it (docs/design.md §8.3).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any

from components.errors import ConfigError
from components.geometry import Space
from components.indexing.stores.faiss.manifest import INDEX_TYPES, IVF_TYPES
from components.indexing.vectors import pq_subvectors

__all__ = ["INDEX_TYPES", "IndexConfig", "check_build_args"]

#: FAISS k-means wants at least this many training points per centroid (it warns below).
MIN_POINTS_PER_CENTROID = 39


LORENTZ_FORMS = ("proxy", "mips_l2")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _bad(name: str, value: Any, want: str, fix: str) -> ConfigError:
    return ConfigError(f"index config field {name!r} must be {want}, got {value!r}; {fix}")


@dataclass(frozen=True)
class IndexConfig:
    """The index type and parameters of a gallery index.

    * ``type``: ``"flat"`` (exact, ``IDMap2,Flat``), ``"ivf"`` (inverted lists of full
      vectors), ``"hnsw"`` (graph over full vectors), ``"ivfpq"`` (inverted lists of
      product-quantised codes: approximate vectors, smallest memory) or ``"ivfsq"`` (inverted lists of 8-bit
      scalar-quantised codes, one byte per coordinate: what ivfpq with one coordinate per sub-quantiser stores, but
      encoded at many times its speed — docs/scale.md).
    * ``nlist``: IVF lists; ``None`` → ``round(4·sqrt(N))`` clamped to
      ``[1, min(N, train_size) / 39]`` (FAISS k-means needs ≥ 39 points per centroid).
    * ``nprobe``: IVF lists scanned per query (clamped to ``nlist``).
    * ``hnsw_m``, ``ef_construction``, ``ef_search``: HNSW graph degree and beam widths.
    * ``pq_m``: PQ sub-quantizers; ``None`` → the divisor m of the stored width whose
      sub-vectors (width/m) are nearest 4 dimensions, the larger m on a tie.
      ``pq_nbits``: bits per sub-quantizer code.
    * ``train_size``: gallery vectors sampled (by ``seed``) to train IVF/PQ.
    * ``recall_queries``: gallery vectors held out (by ``seed``) to measure recall@10 and
      queries/s at build time.
    * ``lorentz_form``: how approximate indexes store Lorentz galleries — ``"proxy"``
      (default: L2 over [2⁻⁸·g_t, g_s], then the ``rerank``·k best candidates re-ranked
      by exact geodesic distance) or ``"mips_l2"`` (the exact MIPS→L2 reduction); see
      :mod:`components.indexing.vectors`. ``rerank``: candidates fetched per wanted
      neighbour in the proxy form.
    * ``shards``: > 1 splits the gallery (by a hash of the id) over that many
      sub-indexes searched in parallel (``faiss.IndexShards``), one file each.
    * ``seed``: seeds the training and recall samples.
    * ``target_recall``: None keeps ``nprobe`` / ``ef_search`` as given; a value in (0, 1]
      lets the build choose the cheapest one whose recall@10 on half the held-out queries
      reaches it, and report recall on the other half (:mod:`components.indexing.stores.faiss.tuning`).

    Invalid values raise :class:`~components.errors.ConfigError` naming the field and the fix.
    """

    type: str = "flat"
    nlist: int | None = None
    nprobe: int = 16
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 96
    pq_m: int | None = None
    pq_nbits: int = 8
    train_size: int = 100_000
    recall_queries: int = 1000
    lorentz_form: str = "proxy"
    rerank: int = 3
    shards: int = 1
    seed: int = 0
    target_recall: float | None = None

    def __post_init__(self) -> None:
        if self.type not in INDEX_TYPES:
            raise _bad("type", self.type, f"one of {', '.join(map(repr, INDEX_TYPES))}", "pick one of those")
        positive = {
            "nprobe": "raise it; 16 is a good start",
            "hnsw_m": "use 16..64 (default 32)",
            "ef_construction": "use >= 40 (default 80)",
            "ef_search": "use >= 10 (default 96)",
            "train_size": "use >= 39 * nlist (default 100000)",
            "recall_queries": "use >= 100 for a stable estimate (default 1000)",
            "rerank": "use 2..4 (default 3)",
            "shards": "use 1 for a single index",
        }
        for name, fix in positive.items():
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise _bad(name, value, "an int >= 1", fix)
        if self.hnsw_m < 2:
            raise _bad("hnsw_m", self.hnsw_m, "an int >= 2", "use 16..64 (default 32)")
        if self.nlist is not None and (not _is_int(self.nlist) or self.nlist < 1):
            raise _bad("nlist", self.nlist, "an int >= 1 or None", "leave it unset for ≈ 4·sqrt(N)")
        if self.pq_m is not None and (not _is_int(self.pq_m) or self.pq_m < 1):
            raise _bad("pq_m", self.pq_m, "an int >= 1 or None", "leave it unset for a divisor of the stored width")
        if not _is_int(self.pq_nbits) or not 1 <= self.pq_nbits <= 16:
            raise _bad("pq_nbits", self.pq_nbits, "an int in [1, 16]", "use 8 (default)")
        if self.lorentz_form not in LORENTZ_FORMS:
            raise _bad("lorentz_form", self.lorentz_form, f"one of {LORENTZ_FORMS}", "use 'proxy' (default)")
        if not _is_int(self.seed) or self.seed < 0:
            raise _bad("seed", self.seed, "an int >= 0", "use any non-negative int")
        t = self.target_recall
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0):
            raise _bad("target_recall", t, "a number in (0, 1] or None", "use e.g. 0.95, or None for fixed effort")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> IndexConfig:
        """Build from a mapping (e.g. the ``index:`` section of params.yaml); unknown keys are a ConfigError."""
        d = dict(d or {})
        unknown = sorted(set(d) - set(asdict(cls())))
        if unknown:
            raise ConfigError(f"unknown index config field(s) {', '.join(unknown)}; known: {', '.join(asdict(cls()))}")
        return cls(**d)

    # ------------------------------------------------------------- resolution
    @property
    def approximate(self) -> bool:
        """True for every type but ``flat``."""
        return self.type != "flat"

    @property
    def trained(self) -> bool:
        """True when the index needs a training sample (IVF coarse quantizer, PQ codebooks)."""
        return self.type in IVF_TYPES

    def train_count(self, n: int) -> int:
        """Training vectors actually used for a gallery of ``n`` items (0 when none are needed)."""
        return min(self.train_size, n) if self.trained else 0

    def resolved_nlist(self, n: int) -> int:
        """IVF list count for ``n`` gallery items (see the class docstring); ConfigError if it cannot be trained."""
        samples = min(self.train_size, n)
        if self.nlist is None:
            return max(1, min(round(4 * math.sqrt(n)), samples // MIN_POINTS_PER_CENTROID))
        if self.nlist > samples:
            raise ConfigError(
                f"index config field 'nlist' is {self.nlist} but only {samples} training vectors are available "
                f"(gallery {n}, train_size {self.train_size}); k-means needs at least one per list: "
                f"lower nlist (ideally <= {max(1, samples // MIN_POINTS_PER_CENTROID)}) or leave it unset"
            )
        return self.nlist

    def resolved_pq_m(self, width: int) -> int:
        """PQ sub-quantizer count for stored vectors of ``width`` (must divide it)."""
        if self.pq_m is None:
            return pq_subvectors(width)
        if width % self.pq_m:
            divisors = [m for m in range(1, width + 1) if width % m == 0]
            raise ConfigError(
                f"index config field 'pq_m' is {self.pq_m} but must divide the stored vector width {width} "
                f"(lorentz: d+1 coordinates, one more with lorentz_form 'mips_l2'); "
                f"use one of {divisors} or leave it unset"
            )
        return self.pq_m

    def l2_form(self, space: Space) -> bool:
        """Whether the index stores an L2 form of the points: an approximate index over a space whose similarity is
        indefinite (Lorentz: ``lorentz_form``, docs/design.md §8.3)."""
        return space.indefinite and self.approximate

    def stored_width(self, space: Space, dim: int) -> int:
        """Width of the index's rows for gallery vectors of width ``dim``: one more for a Lorentz gallery in an
        approximate index with ``lorentz_form: mips_l2`` (the MIPS→L2 coordinate), else ``dim``."""
        return dim + int(self.l2_form(space) and self.lorentz_form == "mips_l2")

    def check_buildable(self, space: Space, dim: int, n: int) -> None:
        """ConfigError now when a gallery of ``n`` vectors of width ``dim`` could not be indexed with this config
        (nlist, pq_m, pq_nbits against the gallery): what :meth:`factory_string` refuses at build time."""
        self.factory_string(self.stored_width(space, dim), n)

    def factory_string(self, dim: int, n: int) -> str:
        """The ``faiss.index_factory`` string built for ``n`` vectors of stored width ``dim``.

        flat ``IDMap2,Flat``; ivf ``IDMap2,IVF{nlist},Flat``; hnsw ``IDMap2,HNSW{m},Flat``;
        ivfpq ``IDMap2,IVF{nlist},PQ{m}x{nbits}np`` (``np``: no polysemous training, which
        only serves polysemous search and is slow); ivfsq ``IDMap2,IVF{nlist},SQ8``. Raises ConfigError when
        ``n`` is too small to train the requested index.
        """
        if not _is_int(dim) or dim < 1 or not _is_int(n) or n < 1:
            raise ConfigError(f"factory_string needs dim >= 1 and n >= 1, got dim={dim!r}, n={n!r}")
        if self.type == "flat":
            return "IDMap2,Flat"
        if self.type == "hnsw":
            return f"IDMap2,HNSW{self.hnsw_m},Flat"
        nlist = self.resolved_nlist(n)
        if self.type == "ivf":
            return f"IDMap2,IVF{nlist},Flat"
        if self.type == "ivfsq":
            return f"IDMap2,IVF{nlist},SQ8"
        codes = 1 << self.pq_nbits
        if min(self.train_size, n) < codes:
            raise ConfigError(
                f"index config field 'pq_nbits' is {self.pq_nbits}: PQ needs at least {codes} training vectors, "
                f"but only {min(self.train_size, n)} are available (gallery {n}, train_size {self.train_size}); "
                "lower pq_nbits, raise train_size, or use type 'ivf' / 'flat' for a gallery this small"
            )
        return f"IDMap2,IVF{nlist},PQ{self.resolved_pq_m(dim)}x{self.pq_nbits}np"

    def params(self, dim: int, n: int) -> dict[str, Any]:
        """The parameters actually used for ``n`` vectors of stored width ``dim`` (recorded in the manifest)."""
        out: dict[str, Any] = {"shards": self.shards, "seed": self.seed}
        if self.trained:
            nlist = self.resolved_nlist(n)
            out.update(nlist=nlist, nprobe=min(self.nprobe, nlist), train_size=self.train_count(n))
        if self.type == "ivfpq":
            out.update(pq_m=self.resolved_pq_m(dim), pq_nbits=self.pq_nbits)
        if self.type == "hnsw":
            out.update(hnsw_m=self.hnsw_m, ef_construction=self.ef_construction, ef_search=self.ef_search)
        return out


def check_build_args(space: Space, generation: int, config: IndexConfig | None) -> IndexConfig:
    """Validate the arguments of an index build; return ``config`` (default: flat). ConfigError otherwise."""
    if not isinstance(space, Space):
        raise ConfigError(
            f"space must be a Space, got {type(space).__name__}; make it with components.geometry.create_space"
        )
    if isinstance(generation, bool) or not isinstance(generation, numbers.Integral) or generation < 0:
        raise ConfigError(f"generation must be an int >= 0, got {generation!r}")
    if config is not None and not isinstance(config, IndexConfig):
        raise ConfigError(f"config must be an IndexConfig, got {type(config).__name__}; use IndexConfig(type=...)")
    return config or IndexConfig()
