"""Region selection (R21-R23) and tool-call pairing (R22b).

A transcript splits into three regions:

- **head** `[0, head_end)`: the leading system messages, then the opening's user messages up to
  and including the goal, while they fit the head budget. The *goal* is the task: a user
  message a host named (`Message.goal`), else the newest user message of the opening (the
  messages before the first assistant message), so a demonstration sent before the task is
  never taken for it. When user messages before the goal do not fit the budget, or a restored
  log puts tool rounds before the goal, the head is the system messages alone: what stands
  before the goal is compactable, oldest first, and the goal is kept verbatim in every
  replacement instead (R21). Every system message, wherever it stands, is kept verbatim too.
- **chain** `[head_end, chain_end)`: what earlier compactions left, up to and including the
  newest summary: summaries in order, with the messages each one kept in front of it. A new
  summary covers only what came after the chain (an incremental chain: earlier summaries are not
  summarized again until they are merged), so a summary is never mistaken for the goal.
- **tail** `[tail_start, n)`: the last `keep_last_messages`, widened backwards until it answers
  no tool call that it did not issue itself, and always holding the newest assistant message
  and everything after it (R23: the result of the tool just called is never compacted away, and
  no request after a compaction lacks the agent's own newest turn). With a token cap, the
  tail keeps fewer messages while it is over the cap (never fewer than the newest turn), so a
  summary frees room even when the last messages are large. The cap moves the fold horizon
  too (R18: fold and offload reach up to the tail, wherever it starts).
- **middle** `[head_end, tail_start)`: the chain, then the span a new summary replaces
  (`[chain_end, tail_start)`, keeping pinned messages and the user's own messages in it,
  `summary.kept_user_messages`); the only place fold and image offload may touch (the horizon
  is `tail_start`, R18), pinned messages never.

Pairing: `pair_issues` finds tool results whose call is gone and calls left without a result;
`repair_tool_pairs` turns them into plain text so that no request carries either (R22b).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..messages import Message, TextPart, ToolCall, ToolResult

__all__ = [
    "REMINDER_TAG",
    "SUMMARY_TAG",
    "PairIssues",
    "Regions",
    "call_sites",
    "goal_index",
    "is_goal_candidate",
    "is_summary",
    "newest_turn",
    "no_result_message",
    "opening_goal",
    "orphan_note",
    "pair_issues",
    "pinned_indices",
    "repair_tool_pairs",
    "select_regions",
    "summary_indices",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Regions:
    """Index bounds of the regions: head `[0, head_end)`, tail `[tail_start, n)`.

    The chain is `[head_end, chain_end)`; `chain_end` defaults to `head_end` (no summary yet).
    """

    head_end: int
    tail_start: int
    length: int
    chain_end: int = -1

    def __post_init__(self) -> None:
        if self.chain_end < 0:
            object.__setattr__(self, "chain_end", self.head_end)

    @property
    def middle(self) -> tuple[int, int]:
        """The `[head_end, tail_start)` region between head and tail (chain included)."""
        return (self.head_end, self.tail_start)

    @property
    def span(self) -> tuple[int, int]:
        """The `[chain_end, tail_start)` span a new summary replaces."""
        return (self.chain_end, self.tail_start)

    @property
    def middle_empty(self) -> bool:
        """Whether there is nothing between head and tail."""
        return self.tail_start <= self.head_end

    @property
    def span_empty(self) -> bool:
        """Whether nothing came after the chain that a new summary could replace."""
        return self.tail_start <= self.chain_end


def call_sites(messages: Sequence[Message]) -> dict[str, tuple[int, ToolCall]]:
    """Map each tool call id to the index of the assistant message issuing it, and the call."""
    sites: dict[str, tuple[int, ToolCall]] = {}
    for i, message in enumerate(messages):
        if message.role == "assistant":
            for call in message.tool_calls:
                sites[call.id] = (i, call)
    return sites


def newest_turn(messages: Sequence[Message]) -> frozenset[int]:
    """The newest assistant message, if it called tools, and the results answering it (R23).

    Empty when the newest assistant message called no tool (or there is none).
    """
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role == "assistant":
            ids = {c.id for c in message.tool_calls}
            if not ids:
                return frozenset()
            answers = {
                j
                for j in range(i + 1, len(messages))
                if (r := messages[j].tool_result) is not None and r.call_id in ids
            }
            return frozenset({i, *answers})
    return frozenset()


SUMMARY_TAG = "<compacted-summary>"
REMINDER_TAG = "<system-reminder>"


def is_goal_candidate(message: Message) -> bool:
    """A user message that is the user's own words: not a summary, not a reminder (R21)."""
    if message.role != "user":
        return False
    text = message.text.lstrip()
    return not (text.startswith(SUMMARY_TAG) or text.startswith(REMINDER_TAG))


def is_summary(message: Message) -> bool:
    """Whether `message` is a compaction summary (R30)."""
    return message.role == "user" and message.text.lstrip().startswith(SUMMARY_TAG)


def goal_index(messages: Sequence[Message]) -> int | None:
    """Index of the goal as `messages` alone tell it (`opening_goal`); see the module docstring."""
    return opening_goal(messages)


def opening_goal(messages: Sequence[Message]) -> int | None:
    """The goal of `messages` (R21): the task, not a demonstration sent before it.

    The newest user message named the goal (`Message.goal`), else the newest user message in
    the user's own words before the first assistant message and before the first summary,
    else the first one anywhere. A transcript that was compacted already may hold kept user
    messages before its first summary; a caller that knows the record passes the goal it found
    there instead (`CompactionHooks` does).
    """
    named = [i for i, m in enumerate(messages) if m.goal and m.role == "user"]
    if named:
        return named[-1]
    newest = None
    for i, message in enumerate(messages):
        if message.role == "assistant" or is_summary(message):
            break
        if is_goal_candidate(message):
            newest = i
    if newest is not None:
        return newest
    return next((i for i, m in enumerate(messages) if is_goal_candidate(m)), None)


def summary_indices(messages: Sequence[Message], start: int, end: int) -> list[int]:
    """Indices of the summaries among `messages[start:end]`, in order."""
    return [i for i in range(start, end) if is_summary(messages[i])]


_UNSET = -1


def pinned_indices(messages: Sequence[Message], goal: int | None = _UNSET) -> frozenset[int]:
    """Messages no fold or summary may touch, with their tool pairs.

    Pinned ones, every system message (R21) and the goal (`goal`, default `opening_goal`). A
    pinned assistant message keeps the results answering its calls, and a pinned result keeps
    the message that called it (and so that message's other results): keeping one half of a
    pair alone would leave an orphan for the repair to turn into something else.
    """
    if goal == _UNSET:
        goal = opening_goal(messages)
    keep = {i for i, m in enumerate(messages) if m.pinned or m.role == "system"}
    if goal is not None:
        keep.add(goal)
    if not any(messages[i].role in ("assistant", "tool") for i in keep):
        return frozenset(keep)
    sites = call_sites(messages)
    calls: set[int] = set()
    for i in keep:
        result = messages[i].tool_result
        if result is not None and result.call_id in sites:
            calls.add(sites[result.call_id][0])
        elif messages[i].tool_calls:
            calls.add(i)
    keep |= calls
    for call_at in calls:
        ids = {c.id for c in messages[call_at].tool_calls}
        keep.update(
            j
            for j in range(call_at + 1, len(messages))
            if (r := messages[j].tool_result) is not None and r.call_id in ids
        )
    return frozenset(keep)


def select_regions(
    messages: Sequence[Message],
    keep_last_messages: int,
    *,
    max_tail_tokens: int | None = None,
    estimate: Callable[[Message], int] | None = None,
    goal: int | None = _UNSET,
    head_tokens: int | None = None,
) -> Regions:
    """Split `messages` into head, middle and tail (see the module docstring).

    With `max_tail_tokens` (and the `estimate` to price messages), the tail is the longest one
    of at most `keep_last_messages` that fits the cap, or the shortest one when none does.
    `goal` is the goal's index (default: `opening_goal`); with `head_tokens` (and `estimate`)
    the user messages before the goal stay in the head only while the head fits it.
    """
    if max_tail_tokens is not None and estimate is None:
        raise ValueError("max_tail_tokens needs estimate")
    if head_tokens is not None and estimate is None:
        raise ValueError("head_tokens needs estimate")
    n = len(messages)
    head_end = 0
    while head_end < n and messages[head_end].role == "system":
        head_end += 1
    if goal == _UNSET:
        goal = opening_goal(messages)
    if goal is not None and head_end <= goal < n:
        before = messages[head_end:goal]
        if all(is_goal_candidate(m) for m in before) and (
            not before
            or head_tokens is None
            or estimate is None
            or sum(estimate(m) for m in messages[: goal + 1]) <= head_tokens
        ):
            head_end = goal + 1  # the opening, the goal last: the usual head
    sites = call_sites(messages)
    keep = max(keep_last_messages, 1)
    regions = _with_tail(messages, head_end, keep, sites)
    if max_tail_tokens is None or estimate is None:
        return regions
    prices: dict[int, int] = {}

    def tail_tokens(r: Regions) -> int:
        for i in range(r.tail_start, r.length):
            if i not in prices:
                prices[i] = estimate(messages[i])
        return sum(prices[i] for i in range(r.tail_start, r.length))

    while keep > 1 and tail_tokens(regions) > max_tail_tokens:
        keep -= 1
        regions = _with_tail(messages, head_end, keep, sites)
    return regions


def _with_tail(
    messages: Sequence[Message],
    head_end: int,
    keep: int,
    sites: dict[str, tuple[int, ToolCall]],
) -> Regions:
    """The regions whose tail is the last `keep` messages, widened for R22 and R23."""
    n = len(messages)
    tail_start = max(n - keep, head_end)
    # R23: the newest assistant message and everything after it (every result answering it
    # among them) stay in the tail, so the agent's own newest turn survives any compaction.
    last_assistant = next(
        (i for i in range(n - 1, -1, -1) if messages[i].role == "assistant"), None
    )
    if last_assistant is not None:
        tail_start = min(tail_start, max(last_assistant, head_end))
    # R22: widen until the tail answers no call it did not issue; a result whose issuer is gone
    # (a restored, cut log) cannot be fixed by widening and is planned as is.
    i = n - 1
    while i >= tail_start:
        result = messages[i].tool_result
        if result is not None:
            site = sites.get(result.call_id)
            if site is not None and head_end <= site[0] < tail_start:
                tail_start = site[0]
        i -= 1
    summaries = summary_indices(messages, head_end, tail_start)
    chain_end = summaries[-1] + 1 if summaries else head_end
    return Regions(head_end=head_end, tail_start=tail_start, length=n, chain_end=chain_end)


@dataclass(frozen=True, slots=True, kw_only=True)
class PairIssues:
    """Indices of orphan tool results and of assistant messages with unanswered calls."""

    orphan_results: tuple[int, ...]
    unanswered_calls: tuple[tuple[int, str], ...]

    def __bool__(self) -> bool:
        return bool(self.orphan_results or self.unanswered_calls)


def pair_issues(messages: Sequence[Message]) -> PairIssues:
    """Find tool results without an earlier call and calls never answered later."""
    issued: dict[str, int] = {}
    answered: set[str] = set()
    orphans: list[int] = []
    for i, message in enumerate(messages):
        if message.role == "assistant":
            for call in message.tool_calls:
                issued[call.id] = i
        result = message.tool_result
        if result is not None:
            if result.call_id in issued and result.call_id not in answered:
                answered.add(result.call_id)
            else:
                orphans.append(i)
    unanswered = tuple(
        (i, call_id)
        for call_id, i in sorted(issued.items(), key=lambda kv: kv[1])
        if call_id not in answered
    )
    return PairIssues(orphan_results=tuple(orphans), unanswered_calls=unanswered)


def repair_tool_pairs(messages: Sequence[Message]) -> list[Message]:
    """A copy of `messages` that no provider rejects for broken tool pairing (R22b).

    A result without its call becomes a user note quoting what it said; a call without a result
    gets an explicit `no result recorded` tool result right after the assistant turn's other
    results. Messages without issues are returned as the same objects.
    """
    issues = pair_issues(messages)
    if not issues:
        return list(messages)
    orphans = set(issues.orphan_results)
    missing: dict[int, list[str]] = {}
    for i, call_id in issues.unanswered_calls:
        missing.setdefault(i, []).append(call_id)
    names = {cid: call.name for cid, (_, call) in call_sites(messages).items()}
    out: list[Message] = []
    pending: list[str] = []
    for i, message in enumerate(messages):
        if pending and (message.role != "tool" or i in orphans):
            out.extend(no_result_message(cid, names) for cid in pending)
            pending = []
        if i in orphans:
            result = message.tool_result
            assert result is not None
            out.append(orphan_note(result))
            continue
        out.append(message)
        if i in missing:
            pending = missing[i]
    out.extend(no_result_message(cid, names) for cid in pending)
    return out


def orphan_note(result: ToolResult) -> Message:
    """The user note that stands in for a tool result whose call is not in the transcript."""
    error = ", an error" if result.is_error else ""
    return Message(
        role="user",
        parts=(
            TextPart(
                text=f"[tool result for call {result.call_id!r}, whose call is not in "
                f"this transcript{error}]:\n{result.text}"
            ),
        ),
    )


def no_result_message(call_id: str, names: Mapping[str, str]) -> Message:
    """The error result that answers a call left without one (`names` maps ids to tools)."""
    return Message.tool(
        call_id,
        f"[no result recorded for {names.get(call_id, 'this tool')} call {call_id!r}]",
        is_error=True,
    )
