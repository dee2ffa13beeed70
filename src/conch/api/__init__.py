"""The user-facing facade: `connect()`, `Catalog`, `Table` and the table operations built on
scans and writes (enrich, delete by filter)."""
