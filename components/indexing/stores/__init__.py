"""The gallery stores, one module each, registered with ``@register_store`` (components/indexing/backend.py)."""
