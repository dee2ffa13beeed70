"""Data pipelines: dataset generation, ingestion, enrichment, and the end-to-end demo."""
