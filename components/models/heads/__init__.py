"""One module per embedding head; each registers itself with ``@register_head`` (components/models/head_catalog.py)."""
