"""The prune stage (R17-R19): fold old tool results and offload old images. No LLM, no I/O.

Old tool calls are folded too where their arguments hold long strings (a file written, a patch
applied): each such value becomes a marker and an excerpt, the arguments stay a JSON object
with every key (providers parse them).

Both act only on `[start, horizon)`: normally the middle, the region a summary would shadow, so
the tail stays raw and the next summary replays what the provider cached (R18). The fold marker
keeps the tool name, the original size, the record seq of the original (to recall it) and a
head/tail excerpt; an offloaded image becomes a text pointer with its hash, media type and
round. Both name the original's record seq as `[history seq N]` (`provenance`). The record
keeps every original byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ..messages import ContentPart, ImagePart, Message, Part, TextPart, ToolCall, ToolResult
from ..record.events import Edit
from .provenance import history_ref
from .regions import call_sites

__all__ = [
    "FOLDED_ARGUMENT_PREFIX",
    "FOLDED_TEXT_PREFIX",
    "FOLD_PREFIX",
    "OFFLOAD_PREFIX",
    "PruneResult",
    "fold_arguments",
    "fold_largest",
    "fold_marker",
    "image_pointer",
    "is_folded",
    "prune",
]

FOLD_PREFIX = "[folded tool result: "
FOLDED_ARGUMENT_PREFIX = "[folded argument: "
OFFLOAD_PREFIX = "[image offloaded: "


def image_pointer(image: ImagePart, round_: int, seq: int | None = None) -> str:
    """The text that stands in for an offloaded image (R19), naming its record seq if known."""
    source = image.data if image.data is not None else (image.url or "").encode("utf-8")
    digest = hashlib.sha256(source).hexdigest()[:12]
    pointer = f"{OFFLOAD_PREFIX}{digest}, {image.media_type or 'unknown'}, round {round_}]"
    return f"{pointer} {history_ref(seq)}" if seq is not None else pointer


def is_folded(message: Message) -> bool:
    """Whether `message` is a tool result that has already been folded."""
    result = message.tool_result
    return (
        result is not None
        and bool(result.content)
        and isinstance(result.content[0], TextPart)
        and result.content[0].text.startswith(FOLD_PREFIX)
    )


def fold_marker(
    result: ToolResult, *, tool_name: str, seq: int | None, excerpt_chars: int
) -> ToolResult:
    """`result` with its text folded to a marker keeping `excerpt_chars` of head and tail (R17).

    Images stay, after the marker and in order: whether they are offloaded is the image rule's
    decision (R19), not the fold's.
    """
    text = result.text
    where = f" {history_ref(seq)}" if seq is not None else ""
    header = (
        f"{FOLD_PREFIX}{tool_name}, {len(text):,} chars; the full result is in the record]{where}"
    )
    head_chars = (excerpt_chars + 1) // 2
    tail_chars = excerpt_chars - head_chars
    if len(text) <= excerpt_chars:
        excerpt = text
    else:
        excerpt = text[:head_chars] + "\n…\n" + (text[-tail_chars:] if tail_chars else "")
    marker = TextPart(text=f"{header}\n{excerpt}" if excerpt else header)
    images = tuple(p for p in result.content if isinstance(p, ImagePart))
    return ToolResult(call_id=result.call_id, content=(marker, *images), is_error=result.is_error)


def _fold_value(value: object, excerpt_chars: int, where: str) -> tuple[object, bool]:
    """`value` (decoded JSON) with every long string in it folded; whether one was."""
    if isinstance(value, str):
        if len(value) <= 2 * excerpt_chars + _ARGUMENT_SLACK or value.startswith(
            FOLDED_ARGUMENT_PREFIX
        ):
            return value, False  # short, or folded before (its size and pointer stay true)
        head = (excerpt_chars + 1) // 2
        tail = excerpt_chars - head
        excerpt = f"{value[:head]}\n…\n{value[-tail:] if tail else ''}"
        header = f"{FOLDED_ARGUMENT_PREFIX}{len(value):,} chars; the whole call is in the record]"
        return f"{header}{where}\n{excerpt}", True
    if isinstance(value, dict):
        changed = False
        out: dict[str, object] = {}
        for key, item in value.items():
            out[key], folded = _fold_value(item, excerpt_chars, where)
            changed = changed or folded
        return (out, True) if changed else (value, False)
    if isinstance(value, list):
        pairs = [_fold_value(item, excerpt_chars, where) for item in value]
        if any(folded for _, folded in pairs):
            return [item for item, _ in pairs], True
    return value, False


_ARGUMENT_SLACK = 200  # a string this much over twice the excerpt is worth a marker
_SURROGATE = re.compile("[\ud800-\udfff]")


class _DuplicateKey(ValueError):
    """An object in the arguments names one key twice: re-encoding would merge them."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKey
    return out


def _reject_constant(name: str) -> object:
    raise ValueError(name)  # NaN, Infinity: not JSON, and re-encoded they would change


def _folded_arguments(arguments: str, excerpt_chars: int, where: str) -> str | None:
    """`arguments` re-encoded with their long strings folded, or None to leave them as written.

    Left as written: text that is not a JSON object or array, an object with a key twice, a
    non-finite number (a number too large for a float decodes to infinity), or no string long
    enough to fold. Other numbers keep their value, not always their spelling (`1.0e2` comes
    back `100.0`); the call as the model wrote it stays in the record.
    """
    try:
        decoded = json.loads(
            arguments, object_pairs_hook=_unique_keys, parse_constant=_reject_constant
        )
    except ValueError:
        return None
    if not isinstance(decoded, dict | list):
        return None
    folded, any_folded = _fold_value(decoded, excerpt_chars, where)
    if not any_folded:
        return None
    try:
        text = json.dumps(folded, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a number that overflowed to infinity on decoding
        return None
    # A lone surrogate (valid in JSON's \u escapes, not in UTF-8) goes back to its escape;
    # every other character stays as it is, so the call does not grow.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def fold_arguments(
    message: Message,
    *,
    seq: int | None,
    excerpt_chars: int,
    keep: Collection[str] = (),
) -> Message:
    """`message` with the long strings in its tool calls' arguments folded (not calls in `keep`).

    A string value longer than twice `excerpt_chars` (plus a little) becomes a marker naming
    its size and the record seq of the message, then `excerpt_chars` of its head and tail. The
    arguments stay JSON with every key, re-encoded; arguments that are not JSON, that JSON
    could not re-encode as they are (a key twice, a non-finite number), or that hold no long
    string stay as the model wrote them. A folded string is never folded again, whatever the
    excerpt size, so its size and pointer stay true. Returns `message` itself when no call
    changed.
    """
    where = f" {history_ref(seq)}" if seq is not None else ""
    parts: list[Part] = []
    changed = False
    for part in message.parts:
        if (
            isinstance(part, ToolCall)
            and part.id not in keep
            and len(part.arguments) > 2 * excerpt_chars + _ARGUMENT_SLACK
        ):
            arguments = _folded_arguments(part.arguments, excerpt_chars, where)
            if arguments is not None:
                part = ToolCall(id=part.id, name=part.name, arguments=arguments)
                changed = True
        parts.append(part)
    if not changed:
        return message
    return Message(role=message.role, parts=tuple(parts), pinned=message.pinned, goal=message.goal)


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneResult:
    """What the prune stage changed: the edits, the transcript after them, and the savings."""

    edits: tuple[Edit, ...]
    messages: tuple[Message, ...]
    folded: int
    offloaded: int
    saved_tokens: int

    @property
    def changed(self) -> bool:
        """Whether anything was folded or offloaded."""
        return bool(self.edits)


def _offload(
    message: Message, positions: Collection[int], round_: int, seq: int | None = None
) -> Message:
    """`message` with its images at `positions` (0-based, in `message.images` order) offloaded."""
    seen = 0

    def swap(parts: Sequence[ContentPart]) -> tuple[ContentPart, ...]:
        nonlocal seen
        out: list[ContentPart] = []
        for part in parts:
            if isinstance(part, ImagePart):
                out.append(
                    TextPart(text=image_pointer(part, round_, seq)) if seen in positions else part
                )
                seen += 1
            else:
                out.append(part)
        return tuple(out)

    result = message.tool_result
    if result is not None:
        content = swap(result.content)
        return Message(
            role="tool",
            parts=(ToolResult(call_id=result.call_id, content=content, is_error=result.is_error),),
        )
    # Only user messages carry images outside tool results.
    return Message(
        role=message.role,
        parts=swap([p for p in message.parts if isinstance(p, TextPart | ImagePart)]),
    )


def _kept_results(messages: Sequence[Message], keep_last: int) -> set[int]:
    """Indices of the newest `keep_last` tool results (fewer than asked: all of them)."""
    results = [i for i, m in enumerate(messages) if m.role == "tool"]
    return set(results[max(len(results) - keep_last, 0) :])


def _image_numbers(messages: Sequence[Message]) -> list[range]:
    """For each message, the transcript-wide numbers of its images (in order)."""
    out: list[range] = []
    first = 0
    for message in messages:
        out.append(range(first, first + len(message.images)))
        first += len(message.images)
    return out


def _images_to_offload(
    numbers: Sequence[range], keep_last: int, eligible: Callable[[int], bool]
) -> set[int]:
    """Numbers of the images older than the newest `keep_last` in messages that are `eligible`."""
    first_kept = numbers[-1].stop - keep_last if numbers else 0  # negative: all are kept
    return {n for i, ns in enumerate(numbers) if eligible(i) for n in ns if n < first_kept}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Folding:
    """How one prune run folds a tool result: the tool names, seqs and excerpt size."""

    names: Mapping[str, str]
    seqs: Sequence[int] | None
    excerpt_chars: int
    estimate: Callable[[Message], int]
    kept_calls: frozenset[str] = frozenset()  # calls whose results stay: their arguments too

    def fold(self, message: Message, index: int) -> Message:
        """`message` folded to its marker, or `message` itself when folding would not shrink it.

        A tool result becomes its fold marker; an assistant message's calls keep their
        arguments' keys, their long strings folded (`fold_arguments`).
        """
        if message.role == "assistant":
            if not message.tool_calls:
                return message
            candidate = fold_arguments(
                message,
                seq=self.seqs[index] if self.seqs is not None else None,
                excerpt_chars=self.excerpt_chars,
                keep=self.kept_calls,
            )
            if candidate is message or self.estimate(candidate) >= self.estimate(message):
                return message
            return candidate
        result = message.tool_result
        if result is None or is_folded(message):
            return message
        marker = fold_marker(
            result,
            tool_name=self.names.get(result.call_id, "unknown tool"),
            seq=self.seqs[index] if self.seqs is not None else None,
            excerpt_chars=self.excerpt_chars,
        )
        candidate = Message(role="tool", parts=(marker,))
        return candidate if self.estimate(candidate) < self.estimate(message) else message


def prune(
    messages: Sequence[Message],
    *,
    start: int,
    horizon: int,
    keep_last_tool_results: int,
    fold_excerpt_chars: int,
    image_offload: bool,
    keep_last_images: int,
    estimate: Callable[[Message], int],
    seqs: Sequence[int] | None = None,
    rounds: Sequence[int] | None = None,
    protect: Collection[int] = (),
) -> PruneResult:
    """Fold tool results and calls and offload images in `[start, horizon)`, not `protect`.

    The newest `keep_last_tool_results` results (and the calls they answer) and
    `keep_last_images` images of the whole transcript stay as they are wherever they stand. A
    fold that would not shrink a message is skipped, and already folded results and arguments
    are left alone, so pruning twice changes nothing.
    """

    def in_reach(i: int) -> bool:
        return start <= i < horizon and i not in protect

    keep_results = _kept_results(messages, keep_last_tool_results)
    numbers = _image_numbers(messages)
    offload = _images_to_offload(numbers, keep_last_images, in_reach) if image_offload else set()
    folding = _Folding(
        names={cid: call.name for cid, (_, call) in call_sites(messages).items()},
        seqs=seqs,
        excerpt_chars=fold_excerpt_chars,
        estimate=estimate,
        kept_calls=frozenset(
            result.call_id for i in keep_results if (result := messages[i].tool_result) is not None
        ),
    )
    edits: list[Edit] = []
    out = list(messages)
    folded = offloaded = saved = 0
    for i in filter(in_reach, range(len(messages))):
        message = messages[i]
        new = message if i in keep_results else folding.fold(message, i)
        if new is not message:
            folded += 1
        positions = [k for k, n in enumerate(numbers[i]) if n in offload]
        if positions:
            round_ = rounds[i] if rounds is not None else 0
            new = _offload(new, positions, round_, seqs[i] if seqs is not None else None)
            offloaded += len(positions)
        if new is not message:
            saved += estimate(message) - estimate(new)
            out[i] = new
            edits.append(Edit(index=i, message=new))
    return PruneResult(
        edits=tuple(edits),
        messages=tuple(out),
        folded=folded,
        offloaded=offloaded,
        saved_tokens=saved,
    )


FOLDED_TEXT_PREFIX = "[folded message: "


def _folded_text(message: Message, seq: int | None, excerpt_chars: int) -> Message:
    """A user message cut to a marker keeping `excerpt_chars` of head and tail (no images)."""
    text = message.text
    where = f" {history_ref(seq)}" if seq is not None else ""
    header = f"{FOLDED_TEXT_PREFIX}{len(text):,} chars; the full text is in the record]{where}"
    head = (excerpt_chars + 1) // 2
    tail = excerpt_chars - head
    excerpt = (
        text if len(text) <= excerpt_chars else f"{text[:head]}\n…\n{text[-tail:] if tail else ''}"
    )
    return Message(
        role=message.role,
        parts=(TextPart(text=f"{header}\n{excerpt}"),),
        pinned=message.pinned,
        goal=message.goal,
    )


def fold_largest(
    messages: Sequence[Message],
    *,
    candidates: Collection[int],
    need: int,
    excerpt_chars: int,
    estimate: Callable[[Message], int],
    seqs: Sequence[int] | None = None,
) -> PruneResult:
    """Fold the largest of `candidates` first until `need` tokens are freed (or none is left).

    The last resort when a request would not fit the window (lossy beats stuck): tool results
    become fold markers, long strings in tool calls' arguments are folded (`fold_arguments`),
    user messages become a `[folded message: …]` marker with their head and tail; the record
    keeps every original. Messages that would not shrink are skipped.
    """
    folding = _Folding(
        names={cid: call.name for cid, (_, call) in call_sites(messages).items()},
        seqs=seqs,
        excerpt_chars=excerpt_chars,
        estimate=estimate,
    )
    out = list(messages)
    edits: list[Edit] = []
    saved = 0
    for i in sorted(candidates, key=lambda i: (-estimate(messages[i]), i)):
        if saved >= need:
            break
        message = messages[i]
        if message.tool_result is not None or message.role == "assistant":
            new = folding.fold(message, i)
        elif message.role == "user" and message.text.strip():
            new = _folded_text(message, seqs[i] if seqs is not None else None, excerpt_chars)
        else:
            continue
        gain = estimate(message) - estimate(new)
        if new is message or gain <= 0:
            continue
        saved += gain
        out[i] = new
        edits.append(Edit(index=i, message=new))
    edits.sort(key=lambda e: e.index)
    return PruneResult(
        edits=tuple(edits),
        messages=tuple(out),
        folded=len(edits),
        offloaded=0,
        saved_tokens=saved,
    )
