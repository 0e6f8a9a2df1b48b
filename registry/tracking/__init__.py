"""MLflow: the generation runs, the exported model, the registered model versions and aliases, relocation."""
