"""One module per geometry (docs/design.md §2.6), each registering its :class:`~components.geometry.space.Space`."""
