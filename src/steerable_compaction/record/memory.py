"""`MemoryRecord`: a record that lives only in this process."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Record
from .events import Entry, Event

__all__ = ["MemoryRecord"]


class MemoryRecord(Record):
    """A record that lives only in this process (tests, simulations, throwaway sessions)."""

    def __init__(self, entries: Sequence[Event] = ()) -> None:
        super().__init__(path=None, readonly=False, fsync="never")
        for event in entries:
            self.append(event)

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        """Nothing to write: the entry lives in memory only."""
        self._on_append(entry)

    def _close(self) -> None:
        """Nothing to release."""
