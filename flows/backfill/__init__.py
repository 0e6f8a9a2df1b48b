"""A backfill: its flow, plan, forecast, re-embedding, gallery transform, publication and switch, the
gallery rollback, the backfill rules, and its chunks on a Dask cluster."""
