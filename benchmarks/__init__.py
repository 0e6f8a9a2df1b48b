"""bctflow benchmarks: every alignment method under one protocol (docs/design.md §6), Table-1-style reports.

Why a top-level package and not a Prefect flow: a benchmark trains dozens of
throw-away models under scenario definitions; they are not generations of a
deployed gallery and must not enter the lineage, the live index or the model
registry. The benchmark therefore drives ``components/`` directly (the same
training loop, losses, embedding and metrics the lifecycle uses), caches every
trained model so an interrupted run resumes, and writes its reports to
``benchmarks/results/``.
"""
