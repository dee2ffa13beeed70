"""The write path (DESIGN §3): user input normalised to Arrow, key spaces and fragments written,
the WAL operations that commit them."""
