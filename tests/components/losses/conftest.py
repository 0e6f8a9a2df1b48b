"""Fixtures shared by the alignment-loss tests."""

from __future__ import annotations

import numpy as np
import pytest

from components.data import create_dataset
from components.data.batches import ImageTensor, to_image_tensor


@pytest.fixture(scope="module")
def digits64(tmp_path_factory) -> ImageTensor:
    """The first 64 training images of digits (real data, labels 0–9), as a training tensor."""
    splits = create_dataset("digits", tmp_path_factory.mktemp("digits"))
    sub = splits.train.subset(np.arange(64)).decode()
    return to_image_tensor(sub.images, sub.labels)
