"""Records and counters of the incremental indexer."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["FileRecord", "IndexStats"]


@dataclass(frozen=True, slots=True)
class FileRecord:
    """What the catalog remembers of one indexed file."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    unit_uris: tuple[str, ...] = ()
    graph_subjects: tuple[str, ...] = ()


@dataclass(slots=True)
class IndexStats:
    """Counters of one indexing run (they prove what a re-run did not do)."""

    files_seen: int = 0
    files_read: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_touched: int = 0
    files_deleted: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    units_written: int = 0
    units_reembedded: int = 0
    index_writes: int = 0
    seconds: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        """Count a skipped file under ``reason``."""
        self.files_skipped += 1
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def add(self, other: IndexStats) -> None:
        """Add another run's counters to these."""
        for name, value in asdict(other).items():
            if name == "skipped":
                for reason, n in value.items():
                    self.skipped[reason] = self.skipped.get(reason, 0) + n
            else:
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, object]:
        """The counters as a plain dict (for JSON output)."""
        return asdict(self)
