"""Storage: the protocol every backend implements, and the backends (DESIGN §3, §9)."""

from conch.files.storage.base import FileInfo, RangeReader, Storage, new_id
from conch.files.storage.local import LocalRangeReader, LocalStorage, make_durable

__all__ = ["FileInfo", "LocalRangeReader", "LocalStorage", "RangeReader", "Storage", "make_durable", "new_id"]
