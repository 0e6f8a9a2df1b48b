"""benchmarks/serve.py: what the serving benchmark's corpus and models are made of."""

from __future__ import annotations

from benchmarks.serve import corpus_image_size


def test_the_serving_corpus_takes_its_image_size_from_the_profile_unless_given():
    assert corpus_image_size("cpu", None) == 16
    assert corpus_image_size("serve_resnet18", None) == 28
    assert corpus_image_size("serve_resnet18", 20) == 20
