"""What a method sees before training (components/training/context.py): the batches in order, a seeded random
sample of at most n items, the training augmentation, and the map from new to old labels."""

from __future__ import annotations

import numpy as np
import torch

from components.data.batches import to_image_tensor
from components.models import build_model
from components.training.context import alignment_context
from components.training.data import as_train_data
from tests.helpers import tiny_spec


def _context(n_items: int = 600, seed: int = 3):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n_items, 8, 8, 1), dtype=np.uint8)
    labels = np.arange(n_items) % 10
    data = as_train_data(to_image_tensor(images, labels))
    old = build_model(tiny_spec(num_classes=5, class_order=(4, 3, 2, 1, 0))).eval()
    spec = tiny_spec(zeta=1.2)
    return alignment_context(
        spec,
        torch.device("cpu"),
        data,
        batch_size=32,
        seed=seed,
        crop_padding=1,
        hflip=True,
        old_model=old,
        reference_model=None,
    )


def test_the_sample_is_seeded_random_and_of_the_asked_size():
    ctx = _context()
    first = torch.cat([x for x, _ in ctx.sample(300)])
    assert first.shape == (300, 1, 8, 8)
    again = torch.cat([x for x, _ in ctx.sample(300)])
    assert torch.equal(first, again)  # the same items, in the same order, every time (a resumed run too)
    in_order = torch.cat([x for x, _ in ctx.batches()])[:300]
    assert not torch.equal(first, in_order)  # a random sample, not the first 300 items
    other = torch.cat([x for x, _ in _context(seed=4).sample(300)])
    assert not torch.equal(first, other)  # another run's seed, another sample
    assert sum(len(x) for x, _ in ctx.sample(10_000)) == 600  # never more than the data holds


def test_the_augmentation_is_the_runs_and_the_label_map_points_at_the_parents_classes():
    ctx = _context()
    x = torch.cat([x for x, _ in ctx.batches()])[:64]
    a = ctx.augment(x, torch.Generator().manual_seed(0))
    b = ctx.augment(x, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == x.shape and not torch.equal(a, x)  # seeded crop / flip
    # new labels 0..9; the parent knows classes 4, 3, 2, 1, 0 in that order and not 5..9
    assert ctx.label_map.tolist() == [4, 3, 2, 1, 0, -1, -1, -1, -1, -1]
    assert ctx.seed == 3 and ctx.old_model is not None
