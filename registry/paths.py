"""Paths in the lineage are stored relative to the workspace, so a copied or moved workspace is self-contained.

A path under the workspace root is written as a POSIX path relative to it
(``generations/gen_001/model.pt``) and read back joined to the root the store
was opened with; a path outside the root (an external dataset, an index on
another volume) is kept absolute. Rows written before lineage revision 0003
hold absolute paths; ``bctflow db-upgrade`` rewrites those under the
workspace (docs/commit-protocol.md, "Relocation").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from registry.orm import BackfillEvent, FittedBridge, GalleryPointer, Generation

__all__ = ["PATH_COLUMNS", "WorkspacePaths"]

#: every lineage column that holds a file path, by table
PATH_COLUMNS: dict[str, tuple[str, ...]] = {
    Generation.__tablename__: ("data_snapshot", "checkpoint_path", "index_path", "reference_checkpoint_path"),
    GalleryPointer.__tablename__: ("index_path", "model_checkpoint"),
    BackfillEvent.__tablename__: ("index_path",),
    FittedBridge.__tablename__: ("path",),
}


class WorkspacePaths:
    """Converts paths between their stored (workspace-relative) and usable (absolute) forms.

    ``root``: the workspace; None stores and returns paths unchanged.
    """

    def __init__(self, root: Path | None) -> None:
        self.root = None if root is None else Path(root).expanduser().resolve()

    def stored(self, path: str | None) -> str | None:
        """The form written to the database: relative to the root when under it, else as given."""
        if not path or self.root is None or not Path(path).is_absolute():
            return path
        for p in (Path(path), Path(path).resolve()):
            if p.is_relative_to(self.root):
                return p.relative_to(self.root).as_posix()
        return path

    def usable(self, path: str | None) -> str | None:
        """The form callers use: a stored relative path joined to the root; absolute paths unchanged."""
        if not path or self.root is None or Path(path).is_absolute():
            return path
        return str(self.root / path)

    def store_fields(self, table: str, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` (a row's column → value) with its path columns in stored form."""
        cols = PATH_COLUMNS.get(table, ())
        return {k: (self.stored(v) if k in cols else v) for k, v in values.items()}

    def resolve_row(self, row: Any) -> Any:
        """Give a row read from the database (detached ORM object) usable paths, in place; returns it."""
        if row is not None:
            for col in PATH_COLUMNS.get(row.__tablename__, ()):
                setattr(row, col, self.usable(getattr(row, col)))
        return row
