"""Tool-pair repair kept up to date as a transcript grows (R22b), in O(new messages) per step.

`PairRepair` holds what `repair_tool_pairs(messages)` returns and updates it as messages are
appended: a new message is checked against the calls still open, so a step costs the new
messages plus the open calls, never the transcript. `reset` recomputes it once, after a rewrite.
`PairedProjection` follows a record: appended entries extend the repair, a boundary resets it.

The result is always equal to `repair_tool_pairs` of the same messages (a property test holds
the two together): orphan results become user notes in place, and each call still unanswered
gets its `no result recorded` answer after the results that follow its assistant turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..messages import Message, ToolCall
from ..record.events import CompactionBoundary
from .regions import no_result_message, orphan_note

if TYPE_CHECKING:
    from ..record import Record

__all__ = ["PairRepair", "PairedProjection"]


class PairRepair:
    """`repair_tool_pairs(messages)`, maintained incrementally as `messages` grows.

    `messages` is the repaired list (a read-only view). `changed_from` is the lowest index of
    it that was rewritten rather than appended since the last `mark()`, so a caller can tell
    whether the list it handed out is still a prefix of the new one.
    """

    __slots__ = (
        "_answered",
        "_changed",
        "_first",
        "_issued",
        "_names",
        "_open",
        "_out",
        "_pending",
        "_source",
        "_synthetic",
    )

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        self._out: list[Message] = []
        self._source = 0  # how many source messages have been taken in
        self._issued: dict[str, int] = {}  # call id -> source index of its last issue
        self._first: dict[str, int] = {}  # call id -> order of its first issue
        self._names: dict[str, str] = {}  # call id -> tool name of its last issue
        self._answered: set[str] = set()
        self._pending: list[str] = []  # open calls of the newest turn, answered at the end
        self._open: dict[str, int] = {}  # open calls already answered mid-list -> out index
        self._synthetic: dict[str, Message] = {}  # call id -> its `no result` message
        self._changed = 0
        self.extend(messages)

    def _clear(self) -> None:
        self._out = []
        self._source = 0
        self._issued.clear()
        self._first.clear()
        self._names.clear()
        self._answered.clear()
        self._pending.clear()
        self._open.clear()
        self._synthetic.clear()
        self._changed = 0

    @property
    def messages(self) -> Sequence[Message]:
        """The repaired transcript (a view; copy it with `list()` to keep it)."""
        return self._out

    @property
    def source_length(self) -> int:
        """How many source messages the repair covers."""
        return self._source

    @property
    def changed_from(self) -> int:
        """The lowest index of `messages` rewritten (not appended) since the last `mark()`."""
        return self._changed

    def mark(self) -> None:
        """Start tracking changes afresh: `changed_from` becomes the current length."""
        self._changed = len(self._out)

    def reset(self, messages: Sequence[Message]) -> None:
        """Recompute the repair of `messages` from scratch (after a rewrite)."""
        self._clear()
        self.extend(messages)

    def extend(self, messages: Sequence[Message]) -> None:
        """Take in messages appended to the source, in order."""
        for message in messages:
            self._append(message)

    # -- one message -------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        index = self._source
        self._source += 1
        result = message.tool_result
        if result is not None:
            call_id = result.call_id
            if call_id in self._issued and call_id not in self._answered:
                self._answered.add(call_id)
                self._answer(call_id, message)
                return
            self._flush()
            self._out.append(orphan_note(result))
            return
        self._flush()
        self._out.append(message)
        if message.role == "assistant":
            calls = message.tool_calls
            if calls:
                self._issue(calls, index)

    def _answer(self, call_id: str, message: Message) -> None:
        """Put a result in place; the call it answers loses its `no result` message."""
        # An open call is either the newest turn's (pending, answered at the end) or older.
        position = self._open.pop(call_id, None)
        if position is not None:
            self._delete(position)
        self._drop_tail()
        if position is None:
            self._pending.remove(call_id)
        self._out.append(message)
        self._put_tail()

    def _issue(self, calls: tuple[ToolCall, ...], index: int) -> None:
        for call in calls:
            call_id = call.id
            if call_id not in self._issued:
                self._first[call_id] = len(self._first)
            self._issued[call_id] = index
            self._names[call_id] = call.name
            self._synthetic.pop(call_id, None)  # its name may have changed
            if call_id in self._answered:
                continue  # an id answered before stays answered (as the full repair has it)
            if call_id in self._open:
                self._delete(self._open.pop(call_id))  # it is answered after this turn now
            if call_id not in self._pending:
                self._pending.append(call_id)
        self._pending.sort(key=self._first.__getitem__)
        self._put_tail()

    # -- the open calls ----------------------------------------------------------------------

    def _flush(self) -> None:
        """The newest turn's results are over: its open calls keep their answers in place."""
        pending = self._pending
        if pending:
            start = len(self._out) - len(pending)
            for offset, call_id in enumerate(pending):
                self._open[call_id] = start + offset
            pending.clear()

    def _no_result(self, call_id: str) -> Message:
        message = self._synthetic.get(call_id)
        if message is None:
            message = no_result_message(call_id, self._names)
            self._synthetic[call_id] = message
        return message

    def _drop_tail(self) -> None:
        count = len(self._pending)
        if count:
            del self._out[-count:]
            self._changed = min(self._changed, len(self._out))

    def _put_tail(self) -> None:
        self._out.extend(self._no_result(call_id) for call_id in self._pending)

    def _delete(self, position: int) -> None:
        """Remove a `no result` message from the middle (its call was answered late)."""
        del self._out[position]
        self._changed = min(self._changed, position)
        for call_id, where in self._open.items():
            if where > position:
                self._open[call_id] = where - 1


class PairedProjection:
    """A record's projection with tool pairs repaired (R22b), kept up to date in O(new).

    `sync()` reads the entries appended since the last call: messages and reminders extend the
    repair; a boundary (which may rewrite any message) makes it recompute once.
    """

    __slots__ = ("_record", "_repair", "_seen")

    def __init__(self, record: Record) -> None:
        self._record = record
        self._seen = 0
        self._repair = PairRepair()

    @property
    def repair(self) -> PairRepair:
        """The incremental repair behind `sync()` (for its `changed_from` / `mark`)."""
        return self._repair

    def sync(self) -> Sequence[Message]:
        """The repaired projection as it stands now (a view, valid until the next call)."""
        entries, repair = self._record.entries, self._repair
        projection = self._record.projection.messages
        count = len(entries)
        rewritten = any(
            isinstance(entries[i].event, CompactionBoundary) for i in range(self._seen, count)
        )
        self._seen = count
        done = repair.source_length
        if rewritten or len(projection) < done:
            repair.reset(projection)
        elif len(projection) > done:
            repair.extend(projection[done:])
        return repair.messages
