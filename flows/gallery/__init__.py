"""The data of a run and the one chunked gallery pipeline: the dataset's splits and the training
selection, the gallery sources, and embed → parts → index for every gallery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face

#: the package's public face: each name and the module that defines it (imported on first use)
_FACE = {
    "dataset_splits": "data",
    "GallerySource": "data",
    "open_corpus": "data",
    "embed_gallery": "pipeline",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.gallery.data import GallerySource as GallerySource
    from flows.gallery.data import dataset_splits as dataset_splits
    from flows.gallery.data import open_corpus as open_corpus
    from flows.gallery.pipeline import embed_gallery as embed_gallery
