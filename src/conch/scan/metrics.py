"""What a scan read: counted per scan (never process-wide), reported by `Scan.metrics()`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GroupMetrics:
    """What one column group contributed to a scan."""

    fragments_considered: int = 0
    fragments_pruned_by_stats: int = 0
    fragments_filtered: int = 0  # fragments a filter was pushed into
    fragments_read: int = 0  # fragments values were taken from
    rows_filtered: int = 0  # rows a pushed-down filter ran over
    rows_read: int = 0  # rows of values decoded
    bytes_read: int = 0  # bytes read from storage (Vortex segments + blob ranges)
    bytes_decoded: int = 0  # Arrow bytes decoded
    decoded_whole: int = 0  # read units decoded whole into memory (many small overlapping runs)

    def add_bytes_read(self, n: int) -> None:
        """Charge `n` bytes read from storage to this group."""
        self.bytes_read += n


@dataclass
class ScanMetrics:
    """What a scan read; `Scan.metrics()` after a scan ran."""

    key_spaces: int = 0
    tombstones: int = 0
    keys_merged: int = 0
    keys_out: int = 0
    merge: str = ""
    segments: int = 0  # the streamed path's segments (`conch.scan.segments`); 0: another path
    fragments_considered: int = 0
    fragments_read: int = 0
    fragments_pruned_by_stats: int = 0
    key_bytes_read: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    groups: dict[str, GroupMetrics] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)

    def group(self, name: str) -> GroupMetrics:
        """The metrics of one column group (created on first use)."""
        return self.groups.setdefault(name, GroupMetrics())

    def add_key_bytes_read(self, n: int) -> None:
        """Charge `n` bytes read from key-space and tombstone files."""
        self.key_bytes_read += n

    @property
    def rows_read(self) -> dict[str, int]:
        """Rows read per column group."""
        return {g: m.rows_read for g, m in self.groups.items()}

    @property
    def bytes_read(self) -> dict[str, int]:
        """Bytes read from storage per group (Vortex segment reads and blob ranges)."""
        return {g: m.bytes_read for g, m in self.groups.items()}

    @property
    def value_bytes_read(self) -> int:
        """Bytes read from fragments (every group), i.e. everything but keys."""
        return sum(m.bytes_read for m in self.groups.values())

    @property
    def total_bytes_read(self) -> int:
        """Every byte the scan read from storage: key spaces and all groups."""
        return self.key_bytes_read + self.value_bytes_read

    def render(self) -> list[str]:
        """Human-readable lines, as `Scan.explain()` prints them after a run."""
        lines = [
            f"keys: {self.key_spaces} key spaces merged by {self.merge or '-'} ({self.keys_merged} rows → "
            f"{self.keys_out} live keys, {self.key_bytes_read} B read); {self.rows_out} rows out, {self.bytes_out} B"
        ]
        for g, m in sorted(self.groups.items()):
            lines.append(
                f"{g}: fragments {m.fragments_considered} considered, {m.fragments_pruned_by_stats} pruned by stats,"
                f" {m.fragments_filtered} filtered in-file ({m.rows_filtered} rows), {m.fragments_read} read;"
                f" rows read {m.rows_read}; bytes read {m.bytes_read} (decoded {m.bytes_decoded})"
            )
        return lines
