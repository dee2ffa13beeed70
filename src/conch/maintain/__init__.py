"""Maintenance (spec/003, DESIGN §6): compaction, expire, vacuum and `check`."""
