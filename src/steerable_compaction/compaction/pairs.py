"""Tool-pair repair kept up to date as a transcript grows (R22b), in O(new messages) per step.

`PairRepair` holds what `repair_tool_pairs(messages)` returns and updates it as messages are
appended: a new message is checked against the calls still open, so a step costs the new
messages plus the open calls, never the transcript. `reset` recomputes it once, after a rewrite.
`PairedProjection` follows a record's projection: appended messages extend the repair, a
boundary (a rewrite of the projection) resets it.

The result is always equal to `repair_tool_pairs` of the same messages (a property test holds
the two together): orphan results become user notes in place, and each call still unanswered
gets its `no result recorded` answer after the results that follow its assistant turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

from ..messages import Message, ToolCall, ToolResult
from .regions import no_result_message, orphan_note

__all__ = ["PairRepair", "PairedProjection", "Projected"]


class _Messages(Protocol):
    @property
    def messages(self) -> Sequence[Message]: ...

    @property
    def rewrites(self) -> int: ...


class Projected(Protocol):
    """What `PairedProjection` reads of a record (any `Record` is one): its projection."""

    @property
    def projection(self) -> _Messages:
        """The projection: the `messages` the model sees, and how often they were `rewrites`."""


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
        # The newest turn's `no result` answers stay off the list while results may still
        # come, so a call answered in the same batch never has one made for it.
        # A step brings a few messages: the checks for open calls stand here, not in calls.
        if self._pending:
            self._drop_tail()
        append = self._append
        for message in messages:
            append(message)
        if self._pending:
            self._put_tail()

    # -- one message -------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        index = self._source
        self._source = index + 1
        if message.role == "tool":  # its one part is its result (`Message.tool_result`)
            result = cast("ToolResult", message.parts[0])
            call_id = result.call_id
            if call_id in self._issued and call_id not in self._answered:
                # The result goes in place; the call it answers loses its `no result` message.
                # An open call is either the newest turn's (pending, answered at the end) or
                # older (answered mid-list).
                self._answered.add(call_id)
                position = self._open.pop(call_id, None)
                if position is None:
                    self._pending.remove(call_id)
                else:
                    self._delete(position)
                self._out.append(message)
                return
            if self._pending:
                self._flush()
            self._out.append(orphan_note(result))
            return
        if self._pending:
            self._flush()
        self._out.append(message)
        parts = message.parts
        if message.role == "assistant" and parts and isinstance(parts[-1], ToolCall):
            # Calls come last in an assistant message; a lone call is all its parts.
            calls = cast("tuple[ToolCall]", parts) if len(parts) == 1 else message.tool_calls
            self._issue(calls, index)

    def _issue(self, calls: tuple[ToolCall, ...], index: int) -> None:
        issued, first, pending = self._issued, self._first, self._pending
        for call in calls:
            call_id = call.id
            if call_id in issued:
                self._synthetic.pop(call_id, None)  # issued again: its name may have changed
                if call_id in self._answered:
                    issued[call_id] = index
                    self._names[call_id] = call.name
                    continue  # an id answered before stays answered (as the full repair has it)
                position = self._open.pop(call_id, None)
                if position is not None:
                    self._delete(position)  # it is answered after this turn now
            else:
                first[call_id] = len(first)
            issued[call_id] = index
            self._names[call_id] = call.name
            if call_id not in pending:
                pending.append(call_id)
        if len(pending) > 1:
            pending.sort(key=first.__getitem__)

    # -- the open calls ----------------------------------------------------------------------

    def _flush(self) -> None:
        """The newest turn's results are over: its open calls keep their answers in place."""
        pending = self._pending
        if pending:
            start = len(self._out)
            self._put_tail()
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
        """Take the newest turn's `no result` answers off the end (they follow its results)."""
        count = len(self._pending)
        if count:
            del self._out[-count:]
            self._changed = min(self._changed, len(self._out))

    def _put_tail(self) -> None:
        if self._pending:
            self._out.extend([self._no_result(call_id) for call_id in self._pending])

    def _delete(self, position: int) -> None:
        """Remove a `no result` message from the middle (its call was answered late)."""
        del self._out[position]
        self._changed = min(self._changed, position)
        for call_id, where in self._open.items():
            if where > position:
                self._open[call_id] = where - 1


class PairedProjection:
    """A record's projection with tool pairs repaired (R22b), kept up to date in O(new).

    `sync()` takes in the messages projected since the last call (messages and reminders); a
    boundary (which may rewrite any message) makes it recompute once. No entry is read: the
    projection's `rewrites` count says whether it only grew.
    """

    __slots__ = ("_record", "_repair", "_rewrites")

    def __init__(self, record: Projected) -> None:
        self._record = record
        self._rewrites = 0  # the projection's `rewrites` at the last call
        self._repair = PairRepair()

    @property
    def repair(self) -> PairRepair:
        """The incremental repair behind `sync()` (for its `changed_from` / `mark`)."""
        return self._repair

    def sync(self) -> Sequence[Message]:
        """The repaired projection as it stands now (a view, valid until the next call)."""
        projection, repair = self._record.projection, self._repair
        messages, done = projection.messages, repair._source
        # A rewrite since the last call: anything may have changed. Otherwise messages were
        # only appended (a resumed record's first call starts from an empty repair).
        if projection.rewrites != self._rewrites or len(messages) < done:
            self._rewrites = projection.rewrites
            repair.reset(messages)
        elif len(messages) > done:
            repair.extend(messages[done:])
        return repair._out
