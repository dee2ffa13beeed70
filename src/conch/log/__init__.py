"""The commit log (DESIGN §4, §5a): WAL operations and entries, metastores, the table log,
warehouses and snapshots."""
