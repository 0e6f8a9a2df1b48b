"""What every command runs in: the workspace and its lock, the process environment, the Prefect API,
progress and log lines, retries of transient failures, a run's provenance, Prefect artifacts."""
