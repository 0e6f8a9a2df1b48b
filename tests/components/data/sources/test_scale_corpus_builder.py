"""benchmarks/scale_corpus.py: the synthetic WebDataset corpus of the scale benchmark, built once and cached."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.scale_corpus import CORPUS_FILE, build_scale_corpus
from components.data.sources.decode import resize_uint8
from components.data.sources.shard_index import INDEX_NAME
from tests.components.data.sources.source_files import drain


def _base(m: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """m random 20×20 grey images (pairwise far apart under any small shift or flip) and their labels."""
    rng = np.random.default_rng(11)
    return rng.integers(30, 226, (m, 20, 20, 1), dtype=np.uint8), np.arange(m) % 3


def _variants(img: torch.Tensor) -> torch.Tensor:
    """All ±2 px shifts (zero fill) of ``img`` (1, S, S) and of its mirror: (50, 1, S, S)."""
    s = img.shape[-1]
    out = []
    for base in (img, img.flip(-1)):
        padded = F.pad(base.float(), (2, 2, 2, 2))
        out += [padded[:, dy : dy + s, dx : dx + s] for dy in range(5) for dx in range(5)]
    return torch.stack(out)


def test_items_ids_labels_and_augmentation(tmp_path):
    base, labels = _base()
    seen = []
    src = build_scale_corpus(
        tmp_path / "c",
        90,
        base_images=base,
        base_labels=labels,
        image_size=12,
        shard_size=40,
        seed=3,
        on_progress=lambda done, total: seen.append((done, total)),
    )
    assert len(src) == 90 and len(src.shard_paths) == 3 and seen[-1] == (90, 90)
    np.testing.assert_array_equal(np.sort(src.ids), np.arange(90))
    perm = np.random.default_rng(3).permutation(7)
    np.testing.assert_array_equal(src.labels[np.argsort(src.ids)], labels[perm[np.arange(90) % 7]])
    small = resize_uint8(torch.from_numpy(base).permute(0, 3, 1, 2).contiguous(), 12)
    variants = [_variants(im) for im in small]
    _, items = drain(src, batch_size=32)
    flips = 0
    for i in range(90):
        img = items[i][0].float()
        assert img.shape == (1, 12, 12) and items[i][1] == labels[perm[i % 7]]
        err = [(v - img).abs().mean(dim=(1, 2, 3)) for v in variants]
        own = err[perm[i % 7]]
        assert 3 < float(own.min()) < 9  # its own base image, shifted/flipped, under σ≈8 noise
        assert all(float(e.min()) > float(own.min()) + 3 for k, e in enumerate(err) if k != perm[i % 7])
        flips += int(own.argmin()) >= 25
    assert 20 < flips < 70  # about half are mirrored


def test_a_second_call_reuses_the_corpus_and_other_parameters_rebuild(tmp_path):
    base, labels = _base()
    out = tmp_path / "c"
    first = build_scale_corpus(out, 50, base_images=base, base_labels=labels, image_size=8, shard_size=20)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert CORPUS_FILE in stamps and INDEX_NAME in stamps
    again = build_scale_corpus(out, 50, base_images=base, base_labels=labels, image_size=8, shard_size=20)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert again.fingerprint() == first.fingerprint()
    other = build_scale_corpus(out, 50, base_images=base, base_labels=labels, image_size=8, shard_size=20, seed=1)
    assert other.fingerprint() != first.fingerprint() and len(other) == 50
    bigger = build_scale_corpus(out, 60, base_images=base, base_labels=labels, image_size=8, shard_size=20, seed=1)
    assert len(bigger) == 60 and sorted(bigger.ids.tolist()) == list(range(60))
