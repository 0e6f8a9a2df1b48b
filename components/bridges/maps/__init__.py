"""The bridge map kinds, one module each, registered with :func:`components.bridges.base.register_map`."""
