"""Bring the files and the registry in line with the lineage (docs/commit-protocol.md).

The lineage's SQL COMMIT is the one commit point of a generation or a backfill; everything
after it is re-doable from the committed rows, so a process killed there is finished by the
next command (:func:`roll_forward`, run before every ``run`` / ``backfill`` / ``demo``) or by
``bctflow doctor --repair``:

* a committed generation whose folder is still in staging is moved into ``generations/``
  (when the staged ``model.pt`` is the file the lineage pinned by sha256);
* the live pointer ``live/CURRENT`` is rewritten from the lineage's newest pointer row and the serving index its
  gallery version recorded (a CURRENT written before it named its serving index gets the key);
* MLflow aliases follow the lineage: ``production`` → the generation of the newest promotion,
  ``gallery`` → the generation whose embeddings the live gallery holds, ``gen-N`` → N's version;
* the registered model's description shows the newest committed generation's lineage picture;
* a committed generation's MLflow run not marked FINISHED (its process was killed or stopped after the commit) ends
  FINISHED.
* each registered version's description leads with its generation's state as the lineage has it now (a later
  promotion or backfill changes an older generation's state).

:func:`inspect_workspace` (``bctflow doctor``) also reports what it does not repair on its own:
registered versions tagged with a generation the lineage does not hold (a run killed before its
commit; the same command reuses the version, ``doctor --repair`` deletes it), folders without
a lineage row, checkpoints whose bytes differ from the lineage, live vectors that are not what their manifest says
or whose rows per generation differ from what the lineage's pointer row recorded, and the MLflow artifact URIs of a
copied or moved workspace, or an MLflow store file that is gone. Without ``repair`` it writes nothing: the lineage
and the MLflow store are opened read-only (the URIs that any writing command rewrites are reported instead, and a
missing store file is not created).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from components.errors import IndexIntegrityError
from components.faults import crash_point
from components.indexing.backend import collection_at
from components.indexing.live import LivePointer
from components.indexing.version import GalleryVersion
from components.io import file_sha256
from flows.params import Params
from flows.recovery.model_text import model_description, with_state
from flows.runtime.lock import workspace_lock
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.tracking.registered_model import MlflowRegistry

__all__ = ["PUBLISHING", "Finding", "finish_interrupted", "inspect_workspace", "restate_versions", "roll_forward"]

#: written into ``backfills/in_progress/`` just before a backfill's commit: the index it publishes
PUBLISHING = "PUBLISHING"


@dataclass(frozen=True)
class Finding:
    """One inconsistency: what is wrong, whether it was repaired, and the fix when it was not."""

    what: str
    repaired: bool = False
    fix: str = ""


def _pointer_fields(store: LineageDB) -> dict | None:
    """What ``live/CURRENT`` must hold by the lineage's newest pointer row and the serving index its gallery version
    recorded (None: no live gallery yet)."""
    ptr = store.live_pointer()
    if ptr is None:
        return None
    return {
        "index_dir": Path(ptr.index_path),
        "serving_index": str(GalleryVersion.serving_index_of(ptr.index_path)),
        "generation": ptr.generation_id,
        "compatible_generations": list(ptr.compatible_generations or [ptr.generation_id]),
        "model_checkpoint": ptr.model_checkpoint,
        "zeta": ptr.zeta,
    }


def _folders(ws: Workspace, store: LineageDB, repair: bool) -> list[Finding]:
    out = []
    for g in store.generations():
        final = Path(g.checkpoint_path).parent
        if final.is_dir():
            continue
        staged = ws.staging(g.id)
        pinned = g.checkpoint_sha256 is None or (
            (staged / "model.pt").is_file() and file_sha256(staged / "model.pt") == g.checkpoint_sha256
        )
        if staged.is_dir() and pinned:
            if repair:
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, final)
            out.append(Finding(f"generation {g.id} was committed but its files were still in {staged}", repair))
        else:
            out.append(Finding(f"generation {g.id}'s folder {final} is missing", fix="restore it from a backup"))
    return out


def _live(ws: Workspace, store: LineageDB, repair: bool) -> list[Finding]:
    """live/CURRENT, and the live alias of the store that holds the serving vectors, as the lineage's pointer says
    (the alias is moved after CURRENT, both from the rows; a kill between them is finished here next time)."""
    want = _pointer_fields(store)
    if want is None:
        return []
    live, out = LivePointer(ws.live_dir), []
    if not live.matches(**want):
        if repair:
            live.switch(**want)
        out.append(Finding("live/CURRENT does not match the lineage's live pointer", repair))
    serving = Path(want["serving_index"])
    vectors = collection_at(serving)
    if not vectors.aliased():
        if repair:
            vectors.point_alias([g.id for g in store.generations()])
        out.append(Finding(f"the {vectors.store.name} store's live alias does not name {serving}'s vectors", repair))
    return out


def _live_rows(store: LineageDB) -> list[Finding]:
    """``bctflow doctor``: the store holds the live gallery's vectors as their manifest says — rows per generation
    stamp, width (:meth:`~components.indexing.backend.Collection.verify`) — and as the lineage's pointer row recorded
    them (rows per generation, revision 0007; rows written before it recorded none); not repairable from the
    lineage."""
    ptr = store.live_pointer()
    if ptr is None:
        return []
    serving = GalleryVersion.serving_index_of(ptr.index_path)
    vectors = collection_at(serving)
    try:
        vectors.verify()
        # verified: the store holds the attachment's rows per generation (a database store's counts, the slow part at
        # 100k+ rows, are taken once, by verify; FAISS files count the part store's stamps)
        held = vectors.facts().rows_by_generation
    except IndexIntegrityError as err:
        return [Finding(f"the live gallery's vectors are not what their manifest says: {err}", fix="see the message")]
    recorded = {int(g): int(n) for g, n in (ptr.rows_by_generation or {}).items()}
    if ptr.rows_by_generation is None or held == recorded:
        return []
    kind = vectors.store.name
    where = f"{kind} collection {ptr.collection}" if ptr.collection else f"{kind} index {serving}"
    what = f"the live gallery ({where}) holds rows per generation {held}, the lineage recorded {recorded}"
    fix = f"run `bctflow backfill --generation {ptr.generation_id}` to publish a complete version, or restore the store"
    return [Finding(what, fix=fix + " from a backup")]


def _aliases(tracking: MlflowRegistry, store: LineageDB, repair: bool) -> list[Finding]:
    versions = {g.id: g.mlflow_version for g in store.generations() if g.mlflow_version}
    want: dict[str, str] = {f"gen-{gid}": v for gid, v in versions.items()}
    prod = store.production_generation_id()
    if prod is not None and prod in versions:
        want["production"] = versions[prod]
    ptr = store.live_pointer()
    if ptr is not None and ptr.generation_id in versions:
        want["gallery"] = versions[ptr.generation_id]
    out, held = [], tracking.aliases()  # one call for every alias (one each took 90 ms of a 1 s rollback)
    for alias, version in want.items():
        if held.get(alias) != version:
            if repair:
                tracking.move_alias(alias, version)
            out.append(Finding(f"MLflow alias {alias} is not on version {version} as the lineage says", repair))
    return out


def _description(tracking: MlflowRegistry, store: LineageDB, repair: bool) -> list[Finding]:
    want = model_description(store)
    if want is None or tracking.model_description() in (None, want):
        return []
    if repair:
        tracking.set_model_description(want)
    return [Finding("the registered model's description does not show the newest generation's lineage", repair)]


def _runs(tracking: MlflowRegistry, store: LineageDB, repair: bool) -> list[Finding]:
    """Committed generations whose MLflow run is not FINISHED: the process was killed after the commit, before the
    run ended (RUNNING), or stopped right after it (KILLED); the rows say the generation is done, so its run ends
    FINISHED."""
    unfinished = tracking.runs.unfinished()
    out = []
    for g in store.generations():
        run_id = g.mlflow_run_id
        if run_id and run_id in unfinished:
            if repair:
                tracking.runs.end(run_id, "FINISHED")
            what = f"generation {g.id}'s MLflow run {run_id} is {unfinished[run_id]}, not FINISHED, after its commit"
            out.append(Finding(what, repair))
    return out


def _relocation(tracking: MlflowRegistry, repair: bool) -> list[Finding]:
    """A copied or moved workspace whose MLflow store still names the old place's artifacts (what any writing
    command rewrites first, :meth:`MlflowRegistry.relocate`)."""
    old = tracking.moved_from()
    if old is None:
        return []
    if repair:
        tracking.relocate()
    what = f"the MLflow store's artifact URIs point under {old}, not under this workspace (it was copied or moved)"
    return [Finding(what, repair, "`bctflow doctor --repair` (or any command that writes) points them here")]


def _version_states(tracking: MlflowRegistry, store: LineageDB, repair: bool) -> list[Finding]:
    timeline, described = store.timeline(), tracking.version_descriptions()
    out = []
    for g in timeline.generations:
        if g.version is None or g.version not in described:
            continue
        want = with_state(described[g.version], timeline.state(g.gen_id))
        if want == described[g.version]:
            continue
        if repair:
            tracking.set_version_description(g.version, want)
        out.append(Finding(f"MLflow version {g.version}'s description does not lead with g{g.gen_id}'s state", repair))
    return out


def restate_versions(tracking: MlflowRegistry, store: LineageDB) -> list[Finding]:
    """Lead every registered version's description with its generation's state as the lineage has it now (after a
    promotion, which changes the promoted generation's state and the one it replaced); what it rewrote."""
    return _version_states(tracking, store, True)


def _backfill_folder(ws: Workspace, store: LineageDB, repair: bool) -> list[Finding]:
    """A backfill killed after its commit left ``in_progress``: give it its event's name, as the backfill would."""
    work = ws.backfill_in_progress
    marker = work / PUBLISHING
    if not marker.is_file():
        return []
    published = str(ws.home / marker.read_text().strip())  # relative to the workspace (absolute before)
    event = next((e for e in store.backfills() if e.index_path == published), None)
    if event is None:
        return []  # not committed: the same command resumes it
    if repair:
        work.rename(ws.finished_backfill_dir(event.id))
    return [Finding(f"backfill {event.id} was committed but its work folder was still {work}", repair)]


def roll_forward(ws: Workspace, params: Params, store: LineageDB | None = None) -> list[Finding]:
    """Finish what committed lineage rows imply (staging moves, live pointer, aliases); returns what it did."""
    with ws.session(params, store) as store:  # a caller's store stays open for the caller
        done = _folders(ws, store, True)
        crash_point("commit.after_move")
        done += _live(ws, store, True)
        crash_point("commit.after_pointer")
        if store.count():
            tracking = ws.tracking(params)
            done += _aliases(tracking, store, True) + _description(tracking, store, True) + _runs(tracking, store, True)
            done += _version_states(tracking, store, True)
        done += _backfill_folder(ws, store, True)
        return [f for f in done if f.repaired]


def _orphan_versions(tracking: MlflowRegistry, store: LineageDB, repair: bool) -> list[Finding]:
    known = {g.mlflow_version for g in store.generations()}
    out = []
    for version, generation in tracking.generation_versions():
        if version in known:
            continue
        if repair:
            tracking.delete_version(version)
        out.append(
            Finding(
                f"MLflow version {version} (generation {generation}) has no lineage row",
                repair,
                "rerun the same command to reuse it, or `bctflow doctor --repair` to delete it",
            )
        )
    return out


def finish_interrupted(params: Params, home: Path, store: LineageDB | None = None) -> list[Finding]:
    """Before a command plans: finish a commit an earlier process was killed in (under the workspace lock).

    Reads only, and writes nothing, when the workspace is consistent (or has no lineage yet); ``store``: a
    read-only session the caller holds for its plan (else one is opened for the check)."""
    ws = Workspace(home)
    with ws.session(params, store, readonly=True) as reader:
        if not reader.count():
            return []
        tracking = ws.tracking(params)
        pending = (
            _folders(ws, reader, False)
            + _live(ws, reader, False)
            + _aliases(tracking, reader, False)
            + _description(tracking, reader, False)
            + _runs(tracking, reader, False)
            + _version_states(tracking, reader, False)
            + _backfill_folder(ws, reader, False)
        )
    if not pending:
        return []
    with workspace_lock(home, "finishing an interrupted commit", params.lineage.db_url):
        return roll_forward(ws, params)


def inspect_workspace(ws: Workspace, params: Params, *, repair: bool = False) -> list[Finding]:
    """Every inconsistency between lineage, files, live pointer and registry (repaired where ``repair``; without it,
    nothing is written)."""
    with ws.lineage(params, readonly=not repair) as store:
        found = _folders(ws, store, repair) + _live(ws, store, repair) + _backfill_folder(ws, store, repair)
        found += _live_rows(store)
        tracking = ws.tracking(params, readonly=not repair)
        gone = tracking.missing_file()
        if store.count() and gone is not None:  # a client would create an empty store: checked, not touched
            what = f"the MLflow tracking store {gone} does not exist, though the lineage records generations"
            found.append(Finding(what, fix="restore it from a backup (or point tracking.mlflow_uri at it)"))
        elif store.count() or repair:
            found += _relocation(tracking, repair)  # first: a writable store's first client would rewrite the URIs
            found += _aliases(tracking, store, repair) + _orphan_versions(tracking, store, repair)
            found += _description(tracking, store, repair) + _runs(tracking, store, repair)
            found += _version_states(tracking, store, repair)
        ids = {g.id for g in store.generations()}
        if ws.generations_dir.is_dir():
            for d in sorted(ws.generations_dir.glob("gen_*")):
                if int(d.name.removeprefix("gen_")) not in ids:
                    found.append(Finding(f"{d} has no lineage row", fix="move it away (a run killed before commit)"))
        for g in store.generations():
            ckpt = Path(g.checkpoint_path)
            if g.checkpoint_sha256 and ckpt.is_file() and file_sha256(ckpt) != g.checkpoint_sha256:
                found.append(Finding(f"{ckpt} differs from the file the lineage pinned", fix="restore it from backup"))
        return found
