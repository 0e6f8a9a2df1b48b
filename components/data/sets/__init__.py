"""One module per dataset; each registers its loader with ``@register_dataset``."""
