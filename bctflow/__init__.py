"""bctflow: backward-compatible embedding lifecycle (train → index → evaluate → register → lineage)."""

__version__ = "0.1.0"
