"""The lineage store: every write of a generation is one transaction.

``commit_generation`` inserts the generation, its evaluations, derived metrics
and diagnostics, its ζ step, its backfill decision and (for generation 0) the
live-gallery pointer, all or nothing. A ``before_commit`` hook runs inside the
transaction (used to move staged artifacts into place), so a failure anywhere
leaves the database as it was.

Opening a store never changes its schema. A new database gets the current
schema on its first write-open; an existing one at an older schema version is
refused until it is opened with ``upgrade=True`` (``bctflow db-upgrade``);
a read-only open (``readonly=True``) issues no DDL at all. A store is a context
manager: ``with ws.lineage(params) as store:`` closes it when the block ends.

The bridges (revision 0008; docs/design.md §11) are rows of the same lineage, like its backfills and promotions:
``record_bridge`` records a fitted map between two generations as the next version of its (from, to, role),
``bridge_chain`` answers which chain of maps carries one generation's vectors into another's space, and
``record_route_choice`` records the upgrade route a rule took for a generation (revision 0009); each record is one
transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from components.errors import LineageError
from registry import schema_version
from registry.db_url import sqlite_path, sqlite_pragmas, store_label
from registry.night_ledger import NightLedger
from registry.orm import (
    BackfillDecision,
    BackfillEvent,
    ChosenRoute,
    CompatSummary,
    Evaluation,
    FittedBridge,
    GalleryPointer,
    Generation,
    GenerationMetric,
    Promotion,
    ZetaStep,
)
from registry.paths import WorkspacePaths
from registry.records import ROUTES, BackfillRecord, BridgeRecord, GenerationBundle, PointerRecord, RouteChoiceRecord

if TYPE_CHECKING:
    from components.evaluation.lineage_timeline import Timeline

__all__ = ["ROLES", "LineageDB", "NoLineageError"]


#: what a bridge does: ``adapter`` maps a new generation's queries into its parent's space, ``transform`` maps stored
#: vectors of an old generation into a new one's
ROLES = ("adapter", "transform")


def _require_generations(s: Any, ids: tuple[int, ...], what: str, fix: str) -> None:
    """LineageError in one line when ``what`` names a generation of ``ids`` the lineage (session ``s``) lacks."""
    known = set(s.scalars(select(Generation.id)))
    missing = [g for g in ids if g not in known]
    if missing:
        raise LineageError(f"{what} names generation {missing[0]}, which this lineage does not hold; {fix}")


class NoLineageError(LineageError):
    """A read-only open found a database without bctflow's tables."""


class LineageDB:
    """Lineage database access. ``url``: any SQLAlchemy URL; ``readonly``: reads only, no schema changes."""

    def __init__(
        self,
        url: str,
        *,
        readonly: bool = False,
        upgrade: bool = False,
        root: Path | None = None,
        label: str | None = None,
    ) -> None:
        """``upgrade``: migrate an older schema to this bctflow's (only ``bctflow db-upgrade`` asks). ``root``: the
        workspace that stored paths are relative to (default: the folder of a SQLite file; none for other URLs).
        ``label``: how messages name the store (default :func:`store_label` of ``url``; an empty stand-in for a
        lineage that does not exist yet names that lineage)."""
        self.label = label or store_label(url)  # for messages: a SQLite file by its path, a password never shows
        self.readonly = readonly
        self.upgraded: list[str] | None = None
        path = sqlite_path(url)
        self.paths = WorkspacePaths(root if root is not None else (path.parent if path is not None else None))
        if path is not None and not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = create_engine(url)
        except (SQLAlchemyError, ValueError) as err:
            raise LineageError(
                f"cannot open lineage database {self.label!r} ({err}); set lineage.db_url to a valid SQLAlchemy URL"
            ) from None
        sqlite_pragmas(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        state = self._state()
        if state.kind == "empty":
            if readonly:
                self.engine.dispose()
                raise NoLineageError(f"lineage database {self.label} holds no bctflow lineage; run `bctflow run` first")
            schema_version.create(self.engine)
        elif state.kind == "ahead":
            raise LineageError(
                f"lineage database {self.label} has schema {state.revision}, newer than this bctflow's "
                f"{schema_version.head_revision()}; upgrade bctflow"
            )
        elif state.kind == "behind" and upgrade and not readonly:
            self.upgraded = schema_version.upgrade(self.engine, root=self.paths.root)
        elif state.kind == "behind":
            raise LineageError(
                f"lineage database {self.label} has schema {state.revision}, older than this bctflow's "
                f"{schema_version.head_revision()}; back it up, then run `bctflow db-upgrade` to migrate it"
            )

    @classmethod
    def empty(cls, label: str) -> LineageDB:
        """An empty lineage in memory, read-only, standing in for the lineage ``label`` names while it does not exist
        yet (read-only callers see "no generations"; messages name that lineage)."""
        store = cls("sqlite://", label=label)
        store.readonly = True
        return store

    def _state(self) -> schema_version.SchemaState:
        try:
            return schema_version.schema_state(self.engine)
        except SQLAlchemyError as err:
            raise LineageError(
                f"cannot read lineage database {self.label} ({type(err).__name__}: {str(err).splitlines()[0]}); check "
                "lineage.db_url and that the server runs, or restore a damaged file from a backup"
            ) from None

    def schema_version(self) -> str | None:
        """The stored schema revision (``legacy vN`` before Alembic); None when the database holds no lineage yet."""
        return self._state().revision

    def close(self) -> None:
        """Release the engine's connections (the store is not used afterwards)."""
        self.engine.dispose()

    def __enter__(self) -> LineageDB:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the store, also when the ``with`` block raised (the exception goes on)."""
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        self._writable()
        with self._sessions.begin() as s:
            yield s

    def _writable(self) -> None:
        if self.readonly:
            raise LineageError(f"lineage database {self.label} was opened read-only; this operation writes")

    # ---- reads ---------------------------------------------------------------------------
    def next_generation_id(self) -> int:
        with self._sessions() as s:
            top = s.scalar(select(func.max(Generation.id)))
        return 0 if top is None else int(top) + 1

    def count(self) -> int:
        with self._sessions() as s:
            return int(s.scalar(select(func.count(Generation.id))) or 0)

    def generation(self, gen_id: int) -> Generation:
        with self._sessions() as s:
            g = s.get(Generation, gen_id)
            if g is None:
                raise LineageError(
                    f"generation {gen_id} is not in the lineage; `bctflow lineage` lists the existing ones"
                )
            return self.paths.resolve_row(g)

    def generation_by_name(self, name: str) -> Generation | None:
        with self._sessions() as s:
            return self.paths.resolve_row(s.scalar(select(Generation).where(Generation.name == name)))

    def generations(self) -> list[Generation]:
        with self._sessions() as s:
            return [self.paths.resolve_row(g) for g in s.scalars(select(Generation).order_by(Generation.id))]

    def live_pointer(self) -> GalleryPointer | None:
        with self._sessions() as s:
            return self.paths.resolve_row(s.scalar(select(GalleryPointer).order_by(GalleryPointer.id.desc()).limit(1)))

    def live_pointers(self) -> list[GalleryPointer]:
        with self._sessions() as s:
            return [self.paths.resolve_row(p) for p in s.scalars(select(GalleryPointer).order_by(GalleryPointer.id))]

    def production_generation_id(self) -> int | None:
        """The generation the `production` alias points to (latest promotion)."""
        with self._sessions() as s:
            return s.scalar(select(Promotion.generation_id).order_by(Promotion.id.desc()).limit(1))

    def backfills(self) -> list[BackfillEvent]:
        with self._sessions() as s:
            return [self.paths.resolve_row(e) for e in s.scalars(select(BackfillEvent).order_by(BackfillEvent.id))]

    def compat_summaries(self, as_of: int | None = None) -> list[CompatSummary]:
        with self._sessions() as s:
            q = select(CompatSummary)
            if as_of is not None:
                q = q.where(CompatSummary.as_of_generation_id == as_of)
            return list(s.scalars(q.order_by(CompatSummary.id)))

    def decision(self, gen_id: int) -> BackfillDecision | None:
        with self._sessions() as s:
            return s.scalar(select(BackfillDecision).where(BackfillDecision.generation_id == gen_id))

    def serving_generation_ids(self) -> list[int]:
        with self._sessions() as s:
            return list(s.scalars(select(Generation.id).where(Generation.status == "serving").order_by(Generation.id)))

    def evaluations(self, query_generation_id: int | None = None) -> list[Evaluation]:
        with self._sessions() as s:
            q = select(Evaluation)
            if query_generation_id is not None:
                q = q.where(Evaluation.query_generation_id == query_generation_id)
            return list(s.scalars(q.order_by(Evaluation.id)))

    def metric_value(
        self, query_id: int, gallery_id: int, metric: str, query_role: str = "model", gallery_role: str = "model"
    ) -> float | None:
        with self._sessions() as s:
            return s.scalar(
                select(Evaluation.value).where(
                    Evaluation.query_generation_id == query_id,
                    Evaluation.gallery_generation_id == gallery_id,
                    Evaluation.metric == metric,
                    Evaluation.query_role == query_role,
                    Evaluation.gallery_role == gallery_role,
                )
            )

    def timeline(self, metric: str | None = None) -> Timeline:
        """Generations and backfills in the order they happened, with the production and live generations;
        ``metric``: the one each generation's cross and old-old values are on (None: none)."""
        from registry.lineage_rows import read_rows
        from registry.timeline import lineage_timeline

        return lineage_timeline(read_rows(self._sessions, self.paths), metric)

    def to_json(self) -> list[dict[str, Any]]:
        """The ``bctflow lineage --json`` document (docs/lineage-json.md), its roles read from the timeline."""
        from registry.lineage_json import lineage_document
        from registry.lineage_rows import read_rows
        from registry.timeline import lineage_timeline

        rows = read_rows(self._sessions, self.paths)
        return lineage_document(rows, lineage_timeline(rows))

    # ---- writes --------------------------------------------------------------------------
    def record_promotion(
        self, gen_id: int, *, forced: bool, by: str, reason: str, before_commit: Callable[[], None] | None = None
    ) -> None:
        """Record that `production` now points to ``gen_id`` (one transaction; ``before_commit`` moves the alias)."""
        self._writable()
        prev = self.production_generation_id()
        try:
            with self._sessions.begin() as s:
                g = s.get(Generation, gen_id)
                if g is None:
                    raise LineageError(
                        f"generation {gen_id} is not in the lineage; `bctflow lineage` lists the existing ones"
                    )
                g.promoted = True
                s.add(Promotion(generation_id=gen_id, previous_generation_id=prev, forced=forced, by=by, reason=reason))
                s.flush()
                if before_commit is not None:
                    before_commit()
        except SQLAlchemyError as err:
            raise LineageError(f"promotion of generation {gen_id} failed and was rolled back ({err})") from err

    def record_backfill(
        self,
        event: BackfillRecord,
        pointer: PointerRecord,
        retire: list[int],
        before_commit: Callable[[], None] | None = None,
        promote: bool = False,
    ) -> int:
        """Record a finished backfill and switch the live pointer (one transaction). Returns the event id.

        ``promote``: the target also becomes the production generation (after a full backfill).
        """
        self._writable()
        prev = self.production_generation_id()
        try:
            with self._sessions.begin() as s:
                ev = BackfillEvent(**self.paths.store_fields(BackfillEvent.__tablename__, asdict(event)))
                s.add(ev)
                s.flush()
                pointer.backfill_id = ev.id
                s.add(GalleryPointer(**self.paths.store_fields(GalleryPointer.__tablename__, asdict(pointer))))
                if promote:
                    target = s.get(Generation, event.to_generation_id)
                    if target is not None:
                        target.promoted = True
                    s.add(
                        Promotion(
                            generation_id=event.to_generation_id,
                            previous_generation_id=prev,
                            forced=False,
                            by="backfill",
                            reason=f"full backfill {ev.id}: the live gallery now holds its embeddings",
                        )
                    )
                for gid in retire:
                    g = s.get(Generation, gid)
                    if g is not None:
                        g.status = "retired"
                s.flush()
                if before_commit is not None:
                    before_commit()
                return int(ev.id)
        except SQLAlchemyError as err:
            raise LineageError(
                f"recording the backfill failed and was rolled back ({err}); the live gallery was not switched"
            ) from err

    def record_rollback(self, pointer: PointerRecord, serving: list[int], promote: int | None, by: str) -> int:
        """Point the live gallery back at an earlier version (one transaction): ``pointer`` is the new newest pointer
        row (a copy of the version's last one); the retired generations in ``serving`` (those whose queries the
        restored gallery accepts) serve again; ``promote``: a generation that becomes production with it. Returns
        the pointer row's id."""
        self._writable()
        prev = self.production_generation_id()
        try:
            with self._sessions.begin() as s:
                row = GalleryPointer(**self.paths.store_fields(GalleryPointer.__tablename__, asdict(pointer)))
                s.add(row)
                for g in s.scalars(select(Generation).where(Generation.id.in_(serving))):
                    g.status = "serving"
                    g.promoted = g.promoted or g.id == promote
                if promote is not None:
                    s.add(
                        Promotion(
                            generation_id=promote,
                            previous_generation_id=prev,
                            forced=False,
                            by=by,
                            reason=pointer.reason,
                        )
                    )
                s.flush()
                return int(row.id)
        except SQLAlchemyError as err:
            raise LineageError(f"recording the rollback failed and was rolled back ({err}); nothing changed") from err

    def commit_generation(self, bundle: GenerationBundle, before_commit: Callable[[], None] | None = None) -> None:
        """Insert everything about one generation in one transaction.

        ``before_commit`` runs after all rows are flushed (constraints checked)
        and before COMMIT; if it or the commit raises, nothing is written.
        """
        self._writable()
        g = bundle.generation
        try:
            with self._sessions.begin() as s:
                if s.get(Generation, g.id) is not None:
                    raise LineageError(
                        f"generation {g.id} already exists in the lineage; another run committed it first, rerun to "
                        "create the next one"
                    )
                s.add(Generation(**self.paths.store_fields(Generation.__tablename__, asdict(g))))
                s.flush()
                for e in bundle.evaluations:
                    s.add(Evaluation(**asdict(e)))
                for name, value in bundle.derived.items():
                    s.add(GenerationMetric(generation_id=g.id, kind="derived", name=name, value=value))
                for name, value in bundle.diagnostics.items():
                    s.add(GenerationMetric(generation_id=g.id, kind="diagnostic", name=name, value=value))
                if bundle.zeta is not None:
                    s.add(ZetaStep(generation_id=g.id, **asdict(bundle.zeta)))
                if bundle.decision is not None:
                    s.add(BackfillDecision(generation_id=g.id, **asdict(bundle.decision)))
                if bundle.pointer is not None:
                    s.add(
                        GalleryPointer(**self.paths.store_fields(GalleryPointer.__tablename__, asdict(bundle.pointer)))
                    )
                for c in bundle.compat:
                    s.add(CompatSummary(as_of_generation_id=g.id, **asdict(c)))
                if bundle.promotion is not None:
                    prev, reason = bundle.promotion
                    s.add(
                        Promotion(
                            generation_id=g.id, previous_generation_id=prev, forced=False, by="gate", reason=reason
                        )
                    )
                s.flush()
                if before_commit is not None:
                    before_commit()
        except SQLAlchemyError as err:
            raise LineageError(
                f"lineage update for generation {g.id} failed and was rolled back ({type(err).__name__}: {err}); "
                "nothing was written"
            ) from err

    # ---- bridges and route choices (revisions 0008, 0009) ---------------------------------
    def record_bridge(self, bridge: BridgeRecord) -> FittedBridge:
        """Record a fitted bridge as the next version of its (from, to, role); refused in one line, nothing
        written, for an unknown role or a generation the lineage does not hold. Returns the row."""
        self._writable()
        if bridge.role not in ROLES:
            raise LineageError(f"a bridge's role is one of {', '.join(ROLES)}, not {bridge.role!r}")
        try:
            with self._sessions.begin() as s:
                what = f"the {bridge.role} bridge g{bridge.from_generation_id}→g{bridge.to_generation_id}"
                _require_generations(s, (bridge.from_generation_id, bridge.to_generation_id), what,
                                     "fit bridges between committed generations")  # fmt: skip
                newest = s.scalar(
                    select(func.max(FittedBridge.version)).where(
                        FittedBridge.from_generation_id == bridge.from_generation_id,
                        FittedBridge.to_generation_id == bridge.to_generation_id,
                        FittedBridge.role == bridge.role,
                    )
                )
                row = FittedBridge(
                    **self.paths.store_fields(FittedBridge.__tablename__, asdict(bridge)), version=(newest or 0) + 1
                )
                s.add(row)
                s.flush()
                return self.paths.resolve_row(row)
        except SQLAlchemyError as err:
            raise LineageError(f"recording the bridge failed and was rolled back ({err})") from err

    def bridges(self) -> list[FittedBridge]:
        """Every bridge row, oldest first (paths absolute)."""
        with self._sessions() as s:
            return [self.paths.resolve_row(r) for r in s.scalars(select(FittedBridge).order_by(FittedBridge.id))]

    def newest_bridge_id(self) -> int:
        """The newest bridge row's id (0: none) — one aggregate, for a service that watches for new bridges."""
        with self._sessions() as s:
            return int(s.scalar(select(func.max(FittedBridge.id))) or 0)

    def bridge_chain(self, source: int, target: int, role: str) -> list[FittedBridge]:
        """The shortest chain of ``role`` bridges (each link its (from, to)'s newest version) that carries
        ``source``'s vectors into ``target``'s space — an adapter chain g2 → g1 → g0, a transform chain g0 → g1 →
        g2. LineageError in one line where none does."""
        newest: dict[tuple[int, int], FittedBridge] = {}
        for row in self.bridges():
            if row.role == role:
                newest[(row.from_generation_id, row.to_generation_id)] = row  # oldest first: the newest stays
        paths: dict[int, list[FittedBridge]] = {source: []}
        frontier = [source]
        while frontier and target not in paths:  # breadth first: the fewest links
            step = []
            for at in frontier:
                for (a, b), row in sorted(newest.items()):
                    if a == at and b not in paths:
                        paths[b] = [*paths[at], row]
                        step.append(b)
            frontier = step
        if target not in paths:
            raise LineageError(
                f"no chain of {role} bridges carries generation {source}'s vectors into generation {target}'s space "
                f"(reached: {', '.join(f'g{g}' for g in sorted(paths))}); fit the missing bridge"
            )
        return paths[target]

    def record_route_choice(self, choice: RouteChoiceRecord) -> ChosenRoute:
        """Record the route a rule took for a generation (one transaction); refused in one line, nothing written, for
        a route that is not one or a generation the lineage does not hold. Returns the row."""
        self._writable()
        if choice.route not in ROUTES:
            raise LineageError(f"an upgrade route is one of {', '.join(ROUTES)}, not {choice.route!r}")
        try:
            with self._sessions.begin() as s:
                what = f"the {choice.route} route of generation {choice.generation_id}"
                _require_generations(s, (choice.generation_id, choice.from_generation_id), what,
                                     "choose routes between committed generations")  # fmt: skip
                row = ChosenRoute(**asdict(choice))
                s.add(row)
                s.flush()
                return row
        except SQLAlchemyError as err:
            raise LineageError(f"recording the route choice failed and was rolled back ({err})") from err

    def route_choices(self) -> list[ChosenRoute]:
        """Every route choice, oldest first (the newest for a generation is the one in force)."""
        with self._sessions() as s:
            return list(s.scalars(select(ChosenRoute).order_by(ChosenRoute.id)))

    @property
    def nights(self) -> NightLedger:
        """The lifecycle's nights (registry/night_ledger.py): decided, acted on, done, and their outcomes."""
        return NightLedger(self._sessions, self._writable)
