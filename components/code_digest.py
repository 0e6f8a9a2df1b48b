"""The digest of the code that shapes a generation: what the nightly check compares besides params and data.

A generation's model is what params.yaml asks for (:func:`flows.params.params_digest`), trained on its data (the
dataset fingerprint) by this package's code. A fix in a loss, the training loop or the model changes the model the
same parameters give, so each generation records :func:`code_digest` (lineage revision 0004) and the nightly check
retrains when it differs (docs/design.md §7.14).

Which code: the ``*.py`` files under :data:`CODE_SHAPING` (models, losses, geometry, training, evaluation, data
loading and augmentation, the gradient helpers) except :data:`CODE_EXCLUDED` — fetching and unpacking dataset files
(their output is what the dataset fingerprint checks), starting training processes (like ``train.nproc``, which
the params digest leaves out too) and drawing plots. The digest is a sha256 over the sorted relative paths and the
bytes of those files: the same for the same code wherever it is installed, independent of mtimes and of
``__pycache__``. It reads the files of the ``components`` package this process imported.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["CODE_EXCLUDED", "CODE_SHAPING", "code_digest", "shaping_files"]

#: the package's folders and modules (relative to its parent folder) whose code shapes a trained model
CODE_SHAPING = (
    "components/autograd.py",
    "components/data",
    "components/evaluation",
    "components/geometry",
    "components/losses",
    "components/models",
    "components/training",
)
#: files inside those whose code does not change what is trained or measured (a list of files, not of params keys:
#: which params shape a model is the tag of each params field, flows/params/tags.py)
CODE_EXCLUDED = frozenset(
    {
        "components/data/archives.py",  # unpacking dataset files: the dataset fingerprint checks the result
        "components/data/download.py",  # fetching dataset files: likewise
        "components/evaluation/lineage_plot.py",  # the lineage's picture
        "components/evaluation/plots.py",  # pictures of the numbers
        "components/models/export.py",  # the serving graph of a trained model (what MLflow registers)
        "components/training/job.py",  # the job folder carrying a training to other nodes
        "components/training/launch.py",  # starting the ranks (torchrun's launcher)
    }
)


def _package_root() -> Path:
    """The folder that holds the imported ``components`` package."""
    import components

    return Path(components.__file__).resolve().parent.parent


def shaping_files(root: Path | None = None) -> list[str]:
    """The relative paths (``components/...``, sorted) whose content :func:`code_digest` hashes."""
    base = root if root is not None else _package_root()
    found: set[str] = set()
    for entry in CODE_SHAPING:
        path = base / entry
        files = [path] if path.suffix == ".py" else path.rglob("*.py")
        found.update(f.relative_to(base).as_posix() for f in files if f.is_file() and "__pycache__" not in f.parts)
    return sorted(found - CODE_EXCLUDED)


def code_digest(root: Path | None = None) -> str:
    """sha256 (hex, 64 chars) over each shaping file's relative path and bytes, in sorted order. ``root``: the
    folder holding ``components/`` (default: the imported package's)."""
    base = root if root is not None else _package_root()
    h = hashlib.sha256()
    for rel in shaping_files(base):
        data = (base / rel).read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()
