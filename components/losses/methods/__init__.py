"""One module per alignment method; each registers itself with ``@register_alignment``."""
