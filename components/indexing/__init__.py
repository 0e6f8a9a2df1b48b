"""Gallery indexing (docs/design.md §7, §8): a gallery's embeddings in stamped parts, and the one seam to the store
that makes them searchable (:mod:`components.indexing.backend`; the stores, FAISS files among them, in
:mod:`components.indexing.stores`)."""
