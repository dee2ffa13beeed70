"""The data model (DESIGN §1, §3): the schema tree, keys and their byte encoding, commit times,
and the few utilities every layer shares (optional dependencies, the memory budget, progress,
the maintenance policy's knobs). Imports nothing else of Conch but `conch.errors`."""
