"""Batching and augmentation on whole uint8 tensors (components/data/batches.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components.data.batches import (
    augment_batch,
    iterate_batches,
    resize_images,
    to_image_tensor,
)

CPU = torch.device("cpu")


def _data(n: int = 23, hw: int = 4):
    images = (np.arange(n * hw * hw, dtype=np.int64) % 251).astype(np.uint8).reshape(n, hw, hw, 1)
    return images, np.arange(n, dtype=np.int64)


def test_to_image_tensor_is_channels_first_uint8():
    images, labels = _data()
    t = to_image_tensor(images, labels)
    assert t.images.shape == (23, 1, 4, 4) and t.images.dtype == torch.uint8
    assert t.labels.dtype == torch.int64 and len(t) == 23
    assert torch.equal(t.images[5, 0], torch.from_numpy(images[5, :, :, 0]))


@pytest.mark.parametrize("batch_size", [1, 5, 23, 50])
def test_shuffled_batches_cover_every_index_once(batch_size):
    images, labels = _data()
    t = to_image_tensor(images, labels)
    seen, sizes = [], []
    for x, y in iterate_batches(t, batch_size, CPU, shuffle=True, generator=torch.Generator().manual_seed(0)):
        assert x.dtype == torch.float32 and x.shape[1:] == (1, 4, 4)
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        # the image of each row belongs to its label (labels are positions here)
        assert torch.allclose(x, t.images[y].float() / 255.0)
        seen.extend(y.tolist())
        sizes.append(len(y))
    assert sorted(seen) == list(range(23))
    assert all(s == batch_size for s in sizes[:-1]) and sum(sizes) == 23
    if batch_size < 23:
        assert seen != list(range(23))  # actually shuffled


def test_shuffle_is_reproducible_and_unshuffled_is_in_order():
    t = to_image_tensor(*_data())

    def order(seed):
        return [
            i
            for _, y in iterate_batches(t, 4, CPU, shuffle=True, generator=torch.Generator().manual_seed(seed))
            for i in y.tolist()
        ]

    assert order(1) == order(1)
    assert order(1) != order(2)
    plain = [i for _, y in iterate_batches(t, 4, CPU, shuffle=False) for i in y.tolist()]
    assert plain == list(range(23))


def test_drop_last():
    t = to_image_tensor(*_data())
    sizes = [
        len(y)
        for _, y in iterate_batches(t, 5, CPU, shuffle=True, generator=torch.Generator().manual_seed(0), drop_last=True)
    ]
    assert sizes == [5, 5, 5, 5]
    # fewer samples than one batch: the single short batch is kept
    sizes = [len(y) for _, y in iterate_batches(t, 50, CPU, shuffle=False, drop_last=True)]
    assert sizes == [23]


def test_random_crop_is_a_shifted_copy():
    b, h, w, p = 32, 5, 6, 1
    x = (torch.arange(h * w, dtype=torch.float32) + 1.0).reshape(1, 1, h, w).repeat(b, 2, 1, 1)
    x[:, 1] *= -1.0  # second channel: same shift must apply to every channel
    out = augment_batch(x, crop_padding=p, hflip=False, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (p, p, p, p))
    offsets = set()
    for i in range(b):
        matches = [
            (dy, dx)
            for dy in range(2 * p + 1)
            for dx in range(2 * p + 1)
            if torch.equal(out[i], padded[i, :, dy : dy + h, dx : dx + w])
        ]
        assert len(matches) == 1, f"sample {i} is not a shifted copy"
        offsets.add(matches[0])
    assert len(offsets) > 3  # offsets are drawn per sample
    again = augment_batch(x, crop_padding=p, hflip=False, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_hflip_flips_some_samples():
    x = torch.arange(32 * 12, dtype=torch.float32).reshape(32, 1, 3, 4)
    out = augment_batch(x, crop_padding=0, hflip=True, generator=torch.Generator().manual_seed(0))
    flipped = [torch.equal(out[i], x[i].flip(-1)) for i in range(32)]
    same = [torch.equal(out[i], x[i]) for i in range(32)]
    assert all(f != s for f, s in zip(flipped, same))  # each sample is either flipped or untouched
    assert 4 < sum(flipped) < 28
    assert torch.equal(augment_batch(x, crop_padding=0, hflip=False), x)


def test_resize_images():
    images, _ = _data(3, 8)
    assert resize_images(images, None) is images
    assert resize_images(images, 8) is images
    out = resize_images(images, 16)
    assert out.shape == (3, 16, 16, 1) and out.dtype == np.uint8
    const = np.full((1, 8, 8, 1), 77, np.uint8)
    assert np.all(resize_images(const, 16) == 77)
