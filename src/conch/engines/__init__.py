"""Engines over Conch: Spark, PyTorch, Polars, DuckDB (each needs its extra)."""
