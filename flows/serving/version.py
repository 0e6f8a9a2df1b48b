"""One served version of the live gallery: its index, its vectors' generation stamps and the models that embed
queries, loaded beside the serving one and verified against the lineage before it may replace it.

What may be served comes from the lineage, never from a guess: the newest live-pointer row names the gallery, the
generations whose queries it accepts, the sha256 of its index manifest and of its model; ``live/CURRENT`` must name
the same index. An image query is embedded by the production generation when the gallery accepts its queries
or the lineage records a chain of query adapters (docs/design.md §11) that carries them into a generation it accepts,
otherwise by the gallery's own model; a vector query of a generation the gallery does not serve is carried by its
adapter chain the same way. A failed check raises :class:`~components.errors.IndexIntegrityError` (or
:class:`~components.errors.CheckpointMismatchError`) and the caller keeps serving what it had.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import CheckpointMismatchError, IndexIntegrityError, LineageError
from components.indexing.backend import ATTACHMENT, SearchIndex, collection_at, open_index
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.params import Params
from flows.runtime.workspace import Workspace

__all__ = [
    "LineageFacts",
    "LiveSwitchPending",
    "ServedVersion",
    "lineage_facts",
    "load_version",
    "pointer_fingerprint",
]


class LiveSwitchPending(IndexIntegrityError):
    """``live/CURRENT`` does not name the live index the lineage's newest pointer row records. Every switch commits
    the lineage row first and rewrites CURRENT from it after (docs/commit-protocol.md), so a reader between the two
    sees this for a few milliseconds; a switch killed between them leaves it until the next command or ``bctflow
    doctor --repair`` rolls it forward. :class:`~flows.serving.swap.SwapManager` waits ``serve.switch_grace_s`` for
    CURRENT to follow before it reports a failed reload."""


@dataclass(frozen=True)
class LineageFacts:
    """What the lineage says about the live gallery, read in one session."""

    pointer_id: int
    generation: int
    index_path: str
    compatible: tuple[int, ...]
    index_sha256: str | None
    #: generation → (checkpoint path, its pinned sha256 or None): the live gallery's model first
    checkpoints: dict[int, tuple[str, str | None]]
    production: int | None
    known: tuple[int, ...]
    #: generation → the query adapters (path, sha256, from, to, version), in chain order, that carry its queries
    #: into a generation the gallery serves — for each generation the gallery does not serve and a chain reaches
    adapters: dict[int, tuple[tuple[str, str, int, int, int], ...]] = field(default_factory=dict)
    #: transform bridge id → what it is (from, to, kind, version, sha256): the maps that may have carried stored rows
    transforms: dict[int, dict[str, Any]] = field(default_factory=dict)


def _adapter_chains(lineage: Any, known: list[int], compatible: tuple[int, ...]) -> dict[int, tuple]:
    """For each known generation the gallery does not serve, the shortest chain of adapter bridges (each link its
    pair's newest version) into one it serves: the lineage's own answer (``bridge_chain``), never a guess."""
    chains: dict[int, tuple] = {}
    for g in known:
        if g in compatible:
            continue
        found = []
        for c in compatible:
            with contextlib.suppress(LineageError):  # no chain into that one
                found.append(lineage.bridge_chain(g, c, "adapter"))
        if found:
            links = min(found, key=len)
            chains[g] = tuple((b.path, b.sha256, b.from_generation_id, b.to_generation_id, b.version) for b in links)
    return chains


def lineage_facts(ws: Workspace, params: Params, store: Any = None) -> LineageFacts:
    """The live gallery's facts from the lineage (IndexIntegrityError when it has no live gallery), read through
    ``store`` (an open read-only LineageDB: a service keeps one — opening one reads the schema's migration scripts,
    Python work that holds the GIL while requests wait) or a store opened for the call."""
    with ws.session(params, store, readonly=True) as lineage:
        ptr = lineage.live_pointer()
        if ptr is None:
            raise IndexIntegrityError(f"the lineage of {ws.home} has no live gallery; create generation 0 first")
        gens = lineage.generations()
        production = lineage.production_generation_id()
        compatible = tuple(int(g) for g in (ptr.compatible_generations or [ptr.generation_id]))
        bridges = lineage.bridges() if lineage.newest_bridge_id() else []
        adapters = _adapter_chains(lineage, [g.id for g in gens], compatible) if bridges else {}
        transforms = {
            int(b.id): {
                "from": b.from_generation_id,
                "to": b.to_generation_id,
                "kind": b.kind,
                "version": b.version,
                "sha256": b.sha256,
            }
            for b in bridges
            if b.role == "transform"
        }
    checkpoints = {g.id: (g.checkpoint_path, g.checkpoint_sha256) for g in gens}
    if ptr.model_checkpoint:
        checkpoints[ptr.generation_id] = (ptr.model_checkpoint, ptr.model_sha256)
    return LineageFacts(
        pointer_id=int(ptr.id),
        generation=int(ptr.generation_id),
        index_path=str(ptr.index_path),
        compatible=compatible,
        index_sha256=ptr.index_sha256,
        checkpoints=checkpoints,
        production=production,
        known=tuple(g.id for g in gens),
        adapters=adapters,
        transforms=transforms,
    )


@dataclass
class ServedVersion:
    """Everything one live version answers with; shared read-only by the requests that started on it."""

    number: int  # live/CURRENT's version
    facts: LineageFacts
    index: SearchIndex
    index_dir: Path
    index_name: str  # the serving index, relative to the workspace
    stamp_ids: np.ndarray  # the gallery's ids, sorted
    stamps: np.ndarray  # the generation whose space each of them is in
    #: the transform bridge that carried each of them into it (0: embedded by its generation's model)
    carried: np.ndarray
    query_generation: int  # the generation that embeds image queries
    embedders: dict[int, Any]  # generation → RetrievalEmbedder (the query generation; every stamp's for merge)
    image_size: int
    channels: int
    device: str
    #: generation → the adapter chain (components.bridges.chain.BridgeChain) carrying its queries into a generation
    #: the gallery serves (LineageFacts.adapters, each file checked against its recorded sha256)
    adapters: dict[int, Any] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.time)
    #: requests answering from this version now (changed under the manager's lock: :meth:`SwapManager.acquire`)
    in_flight: int = 0

    def release(self) -> None:
        """Let go of the index and the models (no request may use the version afterwards): their memory is freed
        in the calling thread, the loader's, instead of on whichever request let go of the version last."""
        self.index = None  # type: ignore[assignment]
        self.embedders = {}

    @cached_property
    def mix(self) -> dict[int, int]:
        """Gallery items per generation stamp (counted once: a version's stamps never change, and with
        ``serve.merge: rank`` every image batch asks)."""
        gens, counts = np.unique(self.stamps, return_counts=True)
        return {int(g): int(c) for g, c in zip(gens, counts)}

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Each gallery id's position in ``stamp_ids`` (clipped: the callers mask ids that are not there)."""
        return np.clip(np.searchsorted(self.stamp_ids, ids), 0, len(self.stamp_ids) - 1)

    def stamps_of(self, ids: np.ndarray) -> np.ndarray:
        """The generation stamp of each gallery id (-1 for -1: no hit)."""
        return np.where(ids >= 0, self.stamps[self._rows(ids)], -1)

    @cached_property
    def any_carried(self) -> bool:
        """Whether a gallery transform carried any row (counted once: a version's rows never change)."""
        return bool(self.carried.any())

    def carried_by(self, ids: np.ndarray) -> list[dict[str, Any] | None] | None:
        """For each gallery id, the transform bridge that carried its stored vector (None: its model embedded it);
        None when no row of the version was carried."""
        if not self.any_carried:
            return None
        return [self.facts.transforms.get(int(b)) if b else None for b in self.carried[self._rows(ids)]]

    def describe(self) -> dict[str, Any]:
        """The version as responses name it."""
        return {
            "version": self.number,
            "gallery_generation": self.facts.generation,
            "index": self.index_name,
            "compatible_generations": list(self.facts.compatible),
        }

    def route(self, generation: int) -> dict[str, Any] | None:
        """How ``generation``'s queries reach the gallery: None when the gallery serves them as they are, else the
        adapter chain — the generations it passes through and each map's kind, version and sha256."""
        chain = self.adapters.get(generation)
        if chain is None:
            return None
        links = self.facts.adapters[generation]
        return {
            "generations": chain.generations,
            "maps": [
                {"from": a, "to": b, "kind": bridge.kind, "version": v, "sha256": sha}
                for (_, sha, a, b, v), bridge in zip(links, chain.links)
            ],
        }

    def searches_as(self, generation: int) -> int:
        """The generation whose queries ``generation``'s (adapted) queries are in the gallery: the chain's end."""
        chain = self.adapters.get(generation)
        return generation if chain is None else int(chain.target)


def _checkpoint(path: str, pinned: str | None, gen: int) -> Any:
    from components.models.checkpoint import read_checkpoint

    ckpt = read_checkpoint(Path(path))
    if pinned is not None and ckpt.sha256 != pinned:
        raise CheckpointMismatchError(
            f"generation {gen}'s model {path} is not the file the lineage pinned (sha256 {pinned[:12]}…); restore it "
            "from a backup"
        )
    return ckpt


def _embedder(path: str, pinned: str | None, gen: int, device: str) -> Any:
    import torch

    from components.models.export import RetrievalEmbedder

    model = _checkpoint(path, pinned, gen).model(device=device)
    with torch.inference_mode():
        return RetrievalEmbedder(model).eval()


def _stamps(index_dir: Path, gen: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids sorted, their generation stamps, the transform bridge that carried each: 0 for none)."""
    store = GalleryParts(GalleryVersion.of_index(index_dir).serving().gallery, generation=gen)
    table = store.columns("ids", "stamps", "bridges")  # one pass over the parts
    ids, stamps = table["ids"].astype(np.int64), table["stamps"].astype(np.int64)
    order = np.argsort(ids, kind="stable")
    return ids[order], stamps[order], table["bridges"][order]


def _relative(path: Path, home: Path) -> str:
    try:
        return path.resolve().relative_to(home.resolve()).as_posix()
    except ValueError:
        return str(path)


def load_version(ws: Workspace, params: Params, *, device: str, merge: str, store: Any = None) -> ServedVersion:
    """Load and verify the live version: CURRENT against the lineage's pointer row, the index manifest against its
    pinned sha256, every file against its manifest checksum, each model against its pinned sha256 (``store``: an
    open read-only LineageDB to read the lineage through, :func:`lineage_facts`)."""
    facts = lineage_facts(ws, params, store)
    live = LivePointer(ws.live_dir)
    pointer = live.pointer()
    if pointer is None or not live.matches(facts.index_path, generation=facts.generation):
        raise LiveSwitchPending(
            f"{live.pointer_path} does not name the live index the lineage records ({facts.index_path}); "
            "`bctflow doctor --repair` rewrites it from the lineage"
        )
    pinned_dir = Path(facts.index_path)
    manifest = pinned_dir / ATTACHMENT
    if facts.index_sha256 and (not manifest.is_file() or collection_at(pinned_dir).digest() != facts.index_sha256):
        raise IndexIntegrityError(
            f"{manifest} is not the manifest the lineage pinned for generation {facts.generation}'s gallery (sha256 "
            f"{facts.index_sha256[:12]}…); restore that folder from a backup or rebuild it with `bctflow backfill`"
        )
    index_dir = live.serving_index()
    index = open_index(index_dir).with_compatible_generations(facts.compatible)
    stamp_ids, stamps, carried = _stamps(Path(facts.index_path), facts.generation)
    adapters = _load_adapters(facts)
    served = set(facts.compatible) | set(adapters)  # an adapter serves the production model's queries too
    query_gen = facts.production if facts.production in served else facts.generation
    wanted = {query_gen}
    if merge == "rank":
        wanted |= {int(g) for g in np.unique(stamps)}
    embedders = {}
    for g in sorted(wanted):
        if g not in facts.checkpoints:
            raise IndexIntegrityError(f"generation {g} stamps the live gallery but is not in the lineage")
        embedders[g] = _embedder(*facts.checkpoints[g], g, device)
    spec = embedders[query_gen].model.spec
    version = ServedVersion(
        number=int(pointer.get("version", 0)),
        facts=facts,
        index=index,
        index_dir=Path(index_dir),
        index_name=_relative(Path(index_dir), ws.home),
        stamp_ids=stamp_ids,
        stamps=stamps,
        carried=carried,
        query_generation=query_gen,
        embedders=embedders,
        adapters=adapters,
        image_size=int(spec.image_size),
        channels=int(spec.in_chans),
        device=device,
    )
    _warm_up(version)
    return version


def _load_adapters(facts: LineageFacts) -> dict[int, Any]:
    """Each adapter chain the lineage names, every file checked against its recorded sha256 and generations
    (IndexIntegrityError / ConfigError in one line: the caller keeps serving what it had)."""
    from components.bridges.base import Bridge
    from components.bridges.chain import BridgeChain

    return {
        g: BridgeChain(tuple(Bridge.load(Path(path), sha256=sha, source=a, target=b) for path, sha, a, b, _ in links))
        for g, links in facts.adapters.items()
    }


def _warm_up(version: ServedVersion) -> None:
    """One query through every model and the index before the version serves (lazy FAISS and torch set-up)."""
    import torch

    blank = torch.zeros((1, version.image_size, version.image_size, version.channels), dtype=torch.uint8)
    with torch.inference_mode():
        for embedder in version.embedders.values():
            vec = embedder(blank.to(version.device)).cpu().numpy().astype(np.float64)
            if version.query_generation in version.adapters and embedder is version.embedders[version.query_generation]:
                vec = version.adapters[version.query_generation].map_queries(vec)
            version.index.search(vec, 1, query_generation=None)


def pointer_fingerprint(ws: Workspace) -> str:
    """A digest of live/CURRENT's bytes ('' when missing): changes when the pointer is switched."""
    path = LivePointer(ws.live_dir).pointer_path
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return ""
