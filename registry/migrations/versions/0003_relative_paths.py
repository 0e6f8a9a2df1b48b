"""Store file paths relative to the workspace, so a copied or moved workspace reads its own files.

A data migration (no schema change): every path column value under the workspace root becomes a
POSIX path relative to it; paths outside it stay absolute. The root is the workspace that runs
``bctflow db-upgrade`` (``config.attributes["workspace_root"]``); without one (the ``alembic`` command
line) the rows are left absolute — still valid in place, not relocatable.

Revision ID: 0003_relative_paths
Revises: 0002_checkpoint_sha256
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import context, op

revision = "0003_relative_paths"
down_revision = "0002_checkpoint_sha256"
branch_labels = None
depends_on = None

#: frozen copy of the path columns at this revision (registry.paths.PATH_COLUMNS may grow later)
_COLUMNS = {
    "generations": ("data_snapshot", "checkpoint_path", "index_path", "reference_checkpoint_path"),
    "gallery_pointers": ("index_path", "model_checkpoint"),
    "backfill_events": ("index_path",),
}


def _root() -> Path | None:
    root = context.config.attributes.get("workspace_root")
    return None if root is None else Path(root)


def _rewrite(convert: Callable[[str], str]) -> None:
    conn = op.get_bind()
    for name, cols in _COLUMNS.items():
        table = sa.table(name, sa.column("id"), *(sa.column(c) for c in cols))
        for row in conn.execute(sa.select(table)).mappings().all():
            new = {c: convert(row[c]) for c in cols if row[c]}
            changed = {c: v for c, v in new.items() if v != row[c]}
            if changed:
                conn.execute(sa.update(table).where(table.c.id == row["id"]).values(**changed))


def upgrade() -> None:
    root = _root()
    if root is None:
        return

    def relative(path: str) -> str:
        p = Path(path)
        return p.relative_to(root).as_posix() if p.is_absolute() and p.is_relative_to(root) else path

    _rewrite(relative)


def downgrade() -> None:
    root = _root()

    def absolute(path: str) -> str:
        if Path(path).is_absolute():
            return path
        if root is None:
            raise RuntimeError(
                f"cannot downgrade below 0003: the lineage holds the relative path {path!r}; pass the workspace root "
                "(config.attributes['workspace_root'])"
            )
        return str(root / path)

    _rewrite(absolute)
