"""scikit-learn's digits: 1,797 8×8 grey images of 10 digits, shipped with scikit-learn.

No official split: a stratified split with ``test_fraction`` and ``split_seed``
is made once (deterministic, part of the fingerprint).
"""

from __future__ import annotations

import numpy as np

from components.data.base import ArrayDataset, array_fingerprint
from components.data.catalog import DatasetRequest, register_dataset
from components.data.sources.split import DatasetSplits
from components.data.split import stratified_split


@register_dataset("digits")
def load_digits(req: DatasetRequest) -> DatasetSplits:
    """Shipped with scikit-learn: ``root``/``download`` unused; fixed 8×8 size (``image_size`` is the caller's
    job) and no user data (``path`` unused)."""
    test_fraction, split_seed = req.test_fraction, req.split_seed
    from sklearn.datasets import load_digits as _sk_digits

    d = _sk_digits()
    # values 0..16 → 0..255
    images = np.clip(np.rint(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)[..., None]
    labels = d.target.astype(np.int64)
    ids = np.arange(len(labels), dtype=np.int64)
    names = tuple(str(c) for c in range(10))
    full = ArrayDataset(images, labels, ids, names)
    tr, te = stratified_split(labels, test_fraction, split_seed)
    fp = array_fingerprint(images, labels, extra=f"digits|{test_fraction}|{split_seed}")
    return DatasetSplits.from_arrays(
        "digits",
        full.subset(tr),
        full.subset(te),
        fp,
        {"split": "stratified", "test_fraction": test_fraction, "split_seed": split_seed},
    )
