"""Files (DESIGN §3, §4): storage backends, the fragment format, masks, integrity checksums,
and manifests (the files a table state holds)."""
