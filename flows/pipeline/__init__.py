"""What other tools run: dvc.yaml generated from params.yaml, one generation's DVC stage, the nightly
Prefect deployment."""
