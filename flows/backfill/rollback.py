"""Rollback: point the live gallery back at a retained earlier gallery version (docs/design.md §8.4).

A *gallery version* is one the lineage's pointer rows have named: generation 0's own gallery (version 0) or a
backfill's ``live/index-v<k>`` (version k; a database store's collections are ``<name>_g<N>_v<k>``).
``bctflow rollback`` returns to the version that was live before the current one; ``--to K`` to version K.

The gate is promotion's seen from the other side: promotion asks the live gallery to accept the promoted
generation's queries (:mod:`flows.generation.promotion`); a rollback asks the restored gallery to accept the production
generation's queries — the compatible generations of its last pointer row. After a full backfill with an
incompatible generation the earlier gallery accepts none of the new production's queries: ``--promote G`` makes a
generation it accepts production in the same transaction (a retired one serves again). Refused, each in one line,
nothing changed: no earlier version, a version never live, the live one, one retention removed
(``gallery.keep_versions``), one whose files or store rows no longer verify or whose index changed since it was live
(the lineage's sha256), and one that would not accept production's queries. The gate's check of the restored
version does not grow with its rows: the facts its publish step sealed (:func:`check_version`,
:mod:`components.indexing.seal`); it verifies in full only a version its seal does not show unchanged.

A rollback is one lineage transaction (:meth:`registry.lineage.LineageDB.record_rollback`): a new newest pointer
row, a copy of the version's last one (its index, model, ζ, compatible generations and pins); the retired
generations the restored gallery accepts serve again. :func:`~flows.recovery.reconcile.roll_forward` then moves
``live/CURRENT`` and the store's own alias from the rows, as after a backfill's commit, so a kill between them is
finished by the next command or ``bctflow doctor --repair``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from components.errors import ConfigError, IndexIntegrityError, LineageError
from components.indexing.backend import collection_at, gallery_facts
from components.indexing.seal import unsealed
from components.indexing.version import GalleryVersion
from flows.params import Params
from flows.params.specs import gallery_store
from flows.recovery.reconcile import roll_forward
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.orm import GalleryPointer
from registry.records import PointerRecord

__all__ = ["RolledBack", "check_version", "gallery_versions", "rollback"]

_REASON_CHARS = 256  # gallery_pointers.reason


@dataclass(frozen=True)
class RolledBack:
    """What a rollback did: from which version to which, the generation whose embeddings fill the restored gallery,
    the generations whose queries it accepts, the new pointer row, its wall seconds (the gate's checks, the lineage
    row and the moves) and ``switch_seconds``, those of the switch alone (from the lineage row to the last move: the
    time the lineage, ``live/CURRENT``, the store's alias and the MLflow aliases may disagree); ``checked``: how the
    gate showed the restored version unchanged since publish (``by its seal``, or ``in full: <why not by its seal>``:
    :func:`check_version`)."""

    previous: int
    version: int
    generation: int
    compatible_generations: list[int]
    pointer_id: int
    seconds: float
    switch_seconds: float
    checked: str


def gallery_versions(store: LineageDB) -> dict[int, GalleryPointer]:
    """Each gallery version the lineage's pointer rows have named: its number → its newest pointer row."""
    return {GalleryVersion.of_index(row.index_path).number: row for row in store.live_pointers()}


def _retained(versions: dict[int, GalleryPointer], current: int) -> list[int]:
    return [k for k, row in sorted(versions.items()) if k != current and Path(row.index_path).is_dir()]


def check_version(k: int, row: GalleryPointer) -> str:
    """Version ``k``'s indexes (evaluation and serving) are what they were when it was published; returns how that
    was shown (``"by its seal"``, or ``"in full: <why its seal did not show it>"``).

    Checked at switch time, in work that does not grow with the gallery (:func:`~components.indexing.seal.unsealed`):
    the version's ``seal.json`` is the file the lineage pinned; every file it serves from (index files, attachments,
    part stores, ``serving.json``) has the size and modification time it was sealed with; each ``manifest.json`` its
    sealed sha256, the evaluation index's the lineage's; each database store's holder exists with the attachment's
    generation, width and columns and the state its build recorded (LanceDB: the table version). Checked only by the
    full verify — here when the seal does not show the version unchanged (published before seals, a copy that did not
    keep modification times, a file changed), and by ``bctflow doctor`` on the live version — the files' contents
    against their sha256 pins and the store's row total (FAISS files: every part's sha256, the index file's on
    load); the rows per generation stamp (36 s of a 1M-row Milvus Lite rollback's 37 when the gate counted them) are
    doctor's alone. A version whose files changed since publish is refused by the full verify, or by the pin."""
    index = Path(row.index_path)
    try:
        why = unsealed(GalleryVersion.of_index(index), row.seal_sha256)
        if why is not None:
            for out in dict.fromkeys((index, GalleryVersion.serving_index_of(index))):
                collection_at(out).verify(by_generation=False)
    except IndexIntegrityError as err:
        raise IndexIntegrityError(f"gallery version {k} cannot serve again: {err}") from None
    if row.index_sha256 and collection_at(index).digest() != row.index_sha256:
        raise IndexIntegrityError(
            f"gallery version {k}'s index changed since it was live ({index} does not match the lineage's sha256); "
            "restore the folder from a backup or roll back to another version"
        )
    return "by its seal" if why is None else f"in full: {why}"


def _target(store: LineageDB, versions: dict[int, GalleryPointer], current: int, to: int | None) -> int:
    """The version to restore: ``to``, or the one live before the current one; refused with one line."""
    retained = _retained(versions, current)
    choose = f"roll back to one of: {', '.join(map(str, retained))}" if retained else "there is none to roll back to"
    if to is None:
        before = [GalleryVersion.of_index(r.index_path).number for r in store.live_pointers()]
        before = [k for k in before if k != current]
        if not before:
            raise ConfigError(f"the live gallery (version {current}) has no earlier version to roll back to")
        to = before[-1]
    if to == current:
        raise ConfigError(f"gallery version {to} is already live; {choose}")
    if to not in versions:
        raise ConfigError(f"gallery version {to} was never live in this lineage; {choose}")
    if to not in retained:
        raise ConfigError(
            f"gallery version {to} is no longer retained (retention removed {versions[to].index_path}; "
            f"params gallery.keep_versions sets how many are kept); {choose}"
        )
    return to


def _promotable(store: LineageDB, k: int, accepted: list[int], promote: int | None) -> None:
    """The gate: the restored version accepts the queries of the production generation (``promote``'s, when the
    rollback names a new one); refused with one line."""
    if promote is not None:
        if promote not in accepted:
            raise ConfigError(
                f"gallery version {k} does not accept queries of generation {promote} (it accepts generations "
                f"{accepted}); --promote one of them"
            )
        if store.generation(promote).mlflow_version is None:
            raise LineageError(f"generation {promote} has no MLflow model version; it cannot be served")
        return
    production = store.production_generation_id()
    if production is not None and production not in accepted:
        raise ConfigError(
            f"gallery version {k} does not accept queries of production generation {production} (it accepts "
            f"generations {accepted}); pass --promote with one of them to make it production with the rollback"
        )


def rollback(
    params: Params, ws: Workspace, *, to: int | None = None, promote: int | None = None, by: str, reason: str = ""
) -> RolledBack:
    """Point the live gallery at gallery version ``to`` (default: the one live before the current one) and, with
    ``promote``, make that generation production in the same transaction; gated and recorded (module docstring).
    ConfigError / IndexIntegrityError / LineageError with one line, nothing changed, when refused. ``seconds``: from
    the gate to the last move (``switch_seconds``: the switch alone). MLflow, the lineage and the gallery store's
    client are imported and connected before it: process start-up (importing lancedb alone took 1.8 s, longer than
    the whole rollback), and MLflow's would otherwise fall between the lineage's new row and the MLflow aliases."""
    ws.tracking(params, readonly=True).prepare()  # MLflow imported, its store opened where it exists: not changed
    gallery_store(params, ws.home).check()  # the store's package imported, its URI answering (one line if not)
    with ws.lineage(params) as store:  # the lineage's database connected (its modules imported): start-up too
        started = time.perf_counter()
        live = store.live_pointer()
        if live is None:
            raise ConfigError("there is no live gallery to roll back; create generation 0 first (bctflow run)")
        versions = gallery_versions(store)
        current = GalleryVersion.of_index(live.index_path).number
        k = _target(store, versions, current, to)
        row = versions[k]
        accepted = sorted(int(g) for g in (row.compatible_generations or [row.generation_id]))
        _promotable(store, k, accepted, promote)
        checked = check_version(k, row)
        text = f"rollback to gallery version {k} by {by}" + (f": {reason}" if reason else "")
        # a row written before lineage revision 0007 names no store: the facts from the version's attachment
        facts = {} if row.store else asdict(gallery_facts(GalleryVersion.serving_index_of(row.index_path)))
        pointer = PointerRecord.of_row(row, reason=text[:_REASON_CHARS], compatible_generations=accepted, **facts)
        ws.tracking(params).client()  # the gate passed: the MLflow client made before the switch, not within it
        switched = time.perf_counter()
        pointer_id = store.record_rollback(pointer, accepted, promote, by)
        roll_forward(ws, params, store)  # live/CURRENT, the store's alias, the MLflow aliases, the versions' states
        done = time.perf_counter()
    return RolledBack(
        current, k, int(row.generation_id), accepted, pointer_id, done - started, done - switched, checked
    )
