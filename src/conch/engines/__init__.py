"""Engines over Conch: Spark, PyTorch, Polars, DuckDB, Hugging Face `datasets` (each needs its extra)."""
