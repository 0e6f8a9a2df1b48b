"""The lineage's nights (revision 0010; docs/design.md §7.18): a lifecycle policy's decision, the action it carried
out, its forecast and, the night after, its outcome.

A night's row is written in three transactions, each one line of the protocol that makes a night crash-consistent:
:meth:`NightLedger.decide` (state ``decided``, the choice and every option), :meth:`NightLedger.acting` (``acting``:
the action is under way; a night found in this state finishes its action and never decides again) and
:meth:`NightLedger.done` (``done``: its cost and the backfill or bridge it made). :meth:`NightLedger.outcome` records
the served mAP@R the action gave, measured the night after. A night's key is unique: deciding a night twice is
refused, so a rerun of a finished night changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from components.errors import LineageError
from registry.orm import Night, utcnow
from registry.records import NightRecord

__all__ = ["STATES", "NightLedger"]

#: a night's states, in order
STATES = ("decided", "acting", "done")


class NightLedger:
    """The ``nights`` rows of one lineage store (its sessions and its write guard)."""

    def __init__(self, sessions: Any, writable: Any) -> None:
        self._sessions, self._writable = sessions, writable

    def night(self, key: str) -> Night | None:
        """The row of night ``key``, None when it was never decided."""
        with self._sessions() as s:
            return s.scalar(select(Night).where(Night.night == key))

    def all(self) -> list[Night]:
        """Every night, oldest first."""
        with self._sessions() as s:
            return list(s.scalars(select(Night).order_by(Night.id)))

    def last(self) -> Night | None:
        """The newest night, None when none was decided."""
        with self._sessions() as s:
            return s.scalar(select(Night).order_by(Night.id.desc()).limit(1))

    def decide(self, record: NightRecord) -> Night:
        """Record night ``record.night``'s decision (state ``decided``); LineageError in one line, nothing written,
        when that night was decided already."""
        self._writable()
        try:
            with self._sessions.begin() as s:
                row = Night(**asdict(record), state="decided", items=0, compute_s=0.0)
                s.add(row)
                s.flush()
                return row
        except IntegrityError:
            raise LineageError(
                f"night {record.night!r} was decided already; a night is decided once (its action resumes if it was "
                "interrupted)"
            ) from None
        except SQLAlchemyError as err:
            raise LineageError(f"recording night {record.night!r} failed and was rolled back ({err})") from err

    def _update(self, key: str, **fields: Any) -> Night:
        self._writable()
        try:
            with self._sessions.begin() as s:
                row = s.scalar(select(Night).where(Night.night == key))
                if row is None:
                    raise LineageError(f"night {key!r} was never decided; decide it before acting on it")
                for name, value in fields.items():
                    setattr(row, name, value)
                s.flush()
                return row
        except SQLAlchemyError as err:
            raise LineageError(f"updating night {key!r} failed and was rolled back ({err})") from err

    def acting(self, key: str) -> Night:
        """Night ``key``'s action is under way."""
        return self._update(key, state="acting")

    def done(self, key: str, *, items: int, compute_s: float, backfill_id: int | None = None,
             bridge_id: int | None = None, carry: dict[str, Any] | None = None) -> Night:  # fmt: skip
        """Night ``key``'s action finished: what it cost, the backfill event or bridge it made, what it carries on."""
        return self._update(key, state="done", items=int(items), compute_s=float(compute_s), backfill_id=backfill_id,
                            bridge_id=bridge_id, carry=carry, finished_at=utcnow())  # fmt: skip

    def outcome(self, key: str, served_map: float) -> Night:
        """The served mAP@R night ``key``'s action gave, measured the night after."""
        return self._update(key, outcome_map=float(served_map))
