"""Feeding engines and models: picklable pinned scans (`loaders.source`), Polars predicate
translation, PyTorch datasets. Imports nothing, so that `conch.enrich` (below the `Table`
facade) can use `loaders.columns` without pulling in the catalog."""
