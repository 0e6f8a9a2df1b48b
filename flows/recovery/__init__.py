"""Roll-forward after a kill: the files, the live pointer and MLflow brought in line with the lineage
(docs/commit-protocol.md), and the registered model's text kept current."""
