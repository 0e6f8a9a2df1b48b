"""bctflow library: geometry, models, losses, data, training, indexing, evaluation.

Nothing in here talks to MLflow, Prefect or the lineage database; flows/ and
registry/ do.
"""
