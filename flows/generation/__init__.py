"""A generation: the ``new-generation`` flow and its steps in order (steps.py), the nightly
retraining, the declared chain, promotion."""
