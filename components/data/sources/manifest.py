"""Images listed in a manifest table: a Parquet (``.parquet`` / ``.pq``) or CSV (``.csv``) file read with pyarrow.

Columns (others are ignored):

- ``path`` (required, text): the image file, relative to the manifest's folder or absolute;
- ``id`` (optional, integer): the item id, unique; without the column the row number (0..N-1) is the id;
- ``label`` (optional): integer class indices, or text class names mapped to their index in the sorted names
  (or in ``class_names`` when given); empty / missing → -1 (unlabelled).

Positions are the rows in file order; batches come in ``positions`` order for any number of workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from components.data.sources.catalog import register_source
from components.data.sources.files import FileSource, PathTable
from components.errors import DataError

__all__ = ["ManifestSource", "read_manifest_table"]

_COLUMNS_HELP = "a manifest needs a text column 'path' and optionally an integer column 'id' and a column 'label'"


def read_manifest_table(path: Path) -> pa.Table:
    """The manifest at ``path`` as a pyarrow Table; DataError when missing, of another format or unreadable."""
    if not path.is_file():
        raise DataError(f"manifest {path} does not exist; point the manifest source at a .parquet or .csv file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if suffix == ".csv":
            import pyarrow.csv as pacsv

            opts = pacsv.ConvertOptions(strings_can_be_null=True, column_types={"path": pa.string()})
            return pacsv.read_csv(path, convert_options=opts)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"cannot read manifest {path} ({type(e).__name__}: {e}); rewrite it ({_COLUMNS_HELP})") from e
    raise DataError(f"manifest {path} is neither .parquet nor .csv; save it as one of them ({_COLUMNS_HELP})")


def _rows(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(mask)[:5].tolist()


def _paths(table: pa.Table, where: str) -> list[str]:
    if "path" not in table.column_names:
        raise DataError(f"{where} has no column 'path' (columns: {table.column_names}); {_COLUMNS_HELP}")
    col = table.column("path")
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise DataError(f"column 'path' of {where} holds {col.type}, not text; {_COLUMNS_HELP}")
    paths = col.to_pylist()
    missing = np.array([p is None or p == "" for p in paths], dtype=bool)
    if missing.any():
        raise DataError(f"{where} has rows without a path (rows {_rows(missing)}); fill them in or drop those rows")
    return paths


def _ids(table: pa.Table, where: str) -> np.ndarray:
    if "id" not in table.column_names:
        return np.arange(table.num_rows, dtype=np.int64)
    col = table.column("id")
    if not pa.types.is_integer(col.type):
        raise DataError(f"column 'id' of {where} holds {col.type}, not integers; {_COLUMNS_HELP}")
    if col.null_count:
        nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        raise DataError(f"{where} has rows without an id (rows {_rows(nulls)}); give every row an id")
    return np.asarray(col.to_numpy(), dtype=np.int64)


def _labels(table: pa.Table, where: str, class_names: Sequence[str] | None) -> tuple[np.ndarray, tuple[str, ...]]:
    n = table.num_rows
    if "label" not in table.column_names:
        return np.full(n, -1, dtype=np.int64), tuple(class_names or ())
    col = table.column("label")
    if pa.types.is_integer(col.type):
        labels = np.asarray(col.fill_null(-1).to_numpy(), dtype=np.int64)
        if (labels < -1).any():
            raise DataError(
                f"{where} has negative labels other than -1 (rows {_rows(labels < -1)}); use -1 or leave empty"
            )
        top = int(labels.max(initial=-1))
        names = tuple(class_names) if class_names is not None else tuple(str(i) for i in range(top + 1))
        if top >= len(names):
            raise DataError(f"{where} has label {top} but only {len(names)} class names; pass all class names")
        return labels, names
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        values = np.array([v if v else "" for v in col.to_pylist()], dtype=object)
        present = values != ""
        names = tuple(class_names) if class_names is not None else tuple(sorted(set(values[present].tolist())))
        index = {c: i for i, c in enumerate(names)}
        unknown = sorted({v for v in values[present].tolist() if v not in index})
        if unknown:
            raise DataError(f"{where} has labels {unknown[:5]} that are not among the class names {list(names)[:10]}")
        labels = np.array([index[v] if v else -1 for v in values.tolist()], dtype=np.int64)
        return labels, names
    raise DataError(f"column 'label' of {where} holds {col.type}: use integer class indices or text class names")


@register_source("manifest")
class ManifestSource(FileSource):
    """The images listed by the manifest at ``path`` (see the module docstring for the columns).

    ``channels`` (1 or 3): None decides from the first image; ``class_names``: the names of integer labels, or the
    order of text labels (default: sorted names, or ``"0".."K-1"`` for integer labels).
    """

    path_form = "a .parquet or .csv manifest file"

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        channels: int | None = None,
        class_names: Sequence[str] | None = None,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        where = f"manifest {self.path}"
        table = read_manifest_table(self.path)
        paths, ids = _paths(table, where), _ids(table, where)
        labels, names = _labels(table, where, class_names)
        super().__init__(
            name or self.path.stem,
            PathTable(paths, self.path.parent),
            ids,
            labels,
            names,
            channels=channels,
            hint=f"replace the file with a valid image or remove its row from {where}",
            where=where,
        )
