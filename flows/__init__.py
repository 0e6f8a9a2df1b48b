"""Prefect flows: thin chains of tasks that call components/ and registry/ through flows.generation.steps."""
