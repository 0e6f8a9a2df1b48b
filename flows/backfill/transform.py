"""A gallery transform as a backfill: the live gallery's stored vectors carried into a new generation's space by a
fitted transform bridge (FCT, CVPR'22), through the backfill machinery (docs/design.md §11).

``bctflow backfill --generation G --transform`` plans a full backfill whose rows come from the live gallery's own
store instead of G's model: every row of generation P (the live gallery's) is mapped by the lineage's newest
transform bridge g{P}→g{G} (:meth:`components.bridges.base.Bridge.map_gallery`: HBCT Eq. (6) ``logmap0``, the map,
Eq. (5) ``expmap0`` onto G's hyperboloid) — a few matrix products per row, no image read, no forward pass. The rest
is the backfill's: parts of ``backfill.chunk_size`` rows written as they are mapped (a killed run keeps its finished
parts; part k holds rows k·chunk … of the live store, in its order), the same publish, verification and atomic
switch. Every row is stamped with G (the space it is in) and with the bridge's lineage id (``bridges``, the map
version that carried it: :class:`~components.indexing.parts.StoredPart`); the backfill event's kind is
``transform`` and names the bridge.

Refused in one line before any work: a fraction below 1, no transform bridge g{P}→g{G} in the lineage, a live
gallery holding other generations' vectors than P's, a bridge file that is not the one recorded (sha256), a bridge
whose source width is not the live vectors'.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.bridges.base import Bridge, fitting_space
from components.errors import ConfigError
from components.faults import crash_point
from components.indexing.parts import PartWriter, StoredPart
from components.indexing.reader import PartReader
from flows.gallery.pipeline import Embedded
from flows.params import Params
from registry.lineage import LineageDB

__all__ = ["PlannedBridge", "check_fraction", "plan_transform", "transform_gallery", "transform_rate"]


class PlannedBridge(BaseModel):
    """The transform bridge a backfill carries the live gallery with: its lineage row ``id`` (the stamp of every row
    it carries), ``version`` of its (source, target), map ``kind``, file and sha256."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    version: int
    kind: str
    path: str
    sha256: str
    source: int
    target: int

    def load(self) -> Bridge:
        """The bridge, refused unless its file is the one the lineage recorded and bridges these generations."""
        return Bridge.load(Path(self.path), sha256=self.sha256, source=self.source, target=self.target)


def check_fraction(fraction: float) -> None:
    """A transform carries every stored vector: a fraction below 1 is refused in one line."""
    if fraction < 1.0:
        raise ConfigError(
            f"a gallery transform carries every stored vector; drop --fraction {fraction} (or re-embed a fraction "
            "without --transform)"
        )


def plan_transform(store: LineageDB, source: int, target: int, live: PartReader) -> PlannedBridge:
    """The newest transform bridge g{source}→g{target}, once the live gallery (its ``live`` store, the evaluation
    gallery) allows it; one line otherwise."""
    key = (source, target, "transform")
    rows = [b for b in store.bridges() if (b.from_generation_id, b.to_generation_id, b.role) == key]
    if not rows:
        raise ConfigError(
            f"the lineage has no transform bridge from generation {source} (the live gallery's) to {target}; fit one: "
            f"bctflow upgrade --generation {target} --route transform --from {source}"
        )
    stamps = live.rows.generations()
    if stamps != [source]:
        raise ConfigError(
            f"the live gallery holds vectors of generations {stamps}; a transform bridge g{source}→g{target} carries "
            f"generation {source}'s only — re-embed instead (bctflow backfill --generation {target}, no --transform)"
        )
    row = max(rows, key=lambda b: b.version)
    planned = PlannedBridge(id=row.id, version=row.version, kind=row.kind, path=row.path, sha256=row.sha256,
                            source=source, target=target)  # fmt: skip
    width = fitting_space(live.first().take(np.arange(1))).shape[1]
    bridge = planned.load()
    if bridge.source_width != width:
        raise ConfigError(
            f"{bridge} v{row.version} maps {bridge.source_width}-wide vectors; the live gallery's are {width}-wide — "
            f"fit the bridge again: bctflow upgrade --generation {target} --route transform --from {source}"
        )
    return planned


def _carry(bridge: Bridge, planned: PlannedBridge, window: StoredPart) -> StoredPart:
    """``window``'s rows mapped into the target's space, each stamped with the target and the bridge's id."""
    n = len(window)
    target, carried = np.full(n, planned.target, np.int64), np.full(n, planned.id, np.int64)
    return StoredPart(bridge.map_gallery(window.gallery), target, carried)


def transform_gallery(
    p: Params,
    live: PartReader,
    planned: PlannedBridge,
    out: Path,
    *,
    on_batch: Callable[[int], None] | None = None,
    throttle: float = 0.0,
) -> Embedded:
    """Carry every row of the live store ``live`` through ``planned``'s bridge into the part store ``out``, each
    row stamped with the target generation and the bridge's id; resumes the parts a killed run finished (their rows
    are read past, not mapped again). Returns what this call did, as an embedding would."""
    t0 = time.perf_counter()
    bridge = planned.load()  # proved again: the file may have changed since the plan
    cs = p.backfill.chunk_size
    writer = PartWriter(out, cs, producer=f"transform bridge {planned.id} sha256 {planned.sha256}; {live.digest()}")
    n_parts = -(-len(live) // cs)
    missing = set(writer.missing_parts(n_parts))
    half = (n_parts - 1) // 2
    first: list[tuple[float, int]] = []
    carried = 0
    for k, window in enumerate(live.windows(cs)):
        if k not in missing:
            continue
        n = len(window)
        part = PartWriter(out, cs, first_part=k)
        part.add(_carry(bridge, planned, window))
        part.flush()  # the last, shorter window
        carried += n
        if not first:
            first.append((time.perf_counter() - t0, n))
        if on_batch is not None:
            on_batch(n)
        if k == half:
            crash_point("embed.half_parts")
        if throttle > 0:
            time.sleep(throttle)
    store = writer.finish()
    startup, first_batch = first[0] if first else (0.0, 0)
    return Embedded(store, carried, time.perf_counter() - t0, n_parts - len(missing), n_parts, startup, first_batch)


def transform_rate(planned: PlannedBridge, live: PartReader, sample: int, batch: int) -> tuple[float, int, float]:
    """A transform's plan, measured as a re-embedding's is: the first ``sample`` rows of ``live`` carried ``batch``
    at a time into parts in a temporary folder. Returns (seconds up to the first batch — the bridge's load and check
    included —, that batch's items, items/s after it)."""
    t0 = time.perf_counter()
    bridge = planned.load()
    done: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="bctflow-plan-") as tmp:
        writer = PartWriter(Path(tmp), batch)
        for window in live.windows(batch):
            writer.add(_carry(bridge, planned, window))
            done.append((time.perf_counter(), len(window)))
            if sum(k for _, k in done) >= sample:
                break
    (t1, first), rest = done[0], done[1:]
    if not rest:  # one batch: its own rate, no fixed cost apart
        return 0.0, 0, first / max(t1 - t0, 1e-9)
    return t1 - t0, first, sum(n for _, n in rest) / max(rest[-1][0] - t1, 1e-9)
