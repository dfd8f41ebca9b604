"""Hypothesis strategies for valid transcripts, shared by every test module.

Every strategy takes a `target` that narrows the values to what a wire format carries
losslessly (see `steerable_compaction.wire`):

| target        | what it leaves out                                                        |
|---------------|---------------------------------------------------------------------------|
| `"any"`       | nothing: every valid neutral value                                        |
| `"openai"`    | images inside tool results, `is_error`, URL images with a `media_type`    |
| `"anthropic"` | non-object arguments, system messages that are late or not one text part  |
| `"both"`      | everything either format leaves out                                       |

`transcripts` / `agent_transcripts` build realistic agent sessions whose tool calls and results
pair up (ids are unique across the transcript); `tool_call_groups` is one round of parallel
calls with their results.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

from hypothesis import strategies as st

from steerable_compaction.messages import (
    ContentPart,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
)

__all__ = [
    "MEDIA_TYPES",
    "Target",
    "agent_transcripts",
    "arguments",
    "assistant_messages",
    "canonical_json",
    "content_parts",
    "images",
    "json_objects",
    "json_values",
    "message_lists",
    "messages",
    "system_messages",
    "texts",
    "tool_call_groups",
    "tool_call_ids",
    "tool_calls",
    "tool_messages",
    "transcripts",
    "user_messages",
]

Target: TypeAlias = Literal["any", "openai", "anthropic", "both"]

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")

# Texts a generator rarely finds on its own: scripts, emoji with modifiers, lone newlines, and
# strings that look like the lossy markers `wire` writes.
_SAMPLE_TEXTS = (
    "",
    "\n",
    " ",
    "ok",
    "写一个函数来解析日志",
    "日本語のテキスト、カタカナ",
    "🙂👍🏽🚀 👨‍👩‍👧",
    "line one\nline two\n",
    "tab\tand\r\nCRLF",
    "Error: this text was already an error",
    "[image: image/png]",
    '{"looks": "like json"}',
)
_TOOL_NAMES = ("read_file", "bash", "search", "write_file", "web_fetch", "apply_patch")
_URLS = (
    "https://example.com/cat.png",
    "http://img.example.org/a/b.jpg?size=large&v=2",
    "https://例え.jp/画像.webp",
)
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_ALNUM = _LOWER + _LOWER.upper() + "0123456789"


@functools.cache
def _memo(factory: Callable[..., st.SearchStrategy[Any]], *args: Any) -> st.SearchStrategy[Any]:
    """`factory(*args)`, built once: composites draw from it without rebuilding strategies."""
    return factory(*args)


def _rich_results(target: Target) -> bool:  # images and `is_error` inside tool results
    return target in ("any", "anthropic")


def _object_arguments(target: Target) -> bool:
    return target in ("anthropic", "both")


def _strict_system(target: Target) -> bool:
    return target in ("anthropic", "both")


def texts(max_size: int = 30) -> st.SearchStrategy[str]:
    """Text with CJK, emoji, newlines and empty strings well represented."""
    return st.one_of(
        st.sampled_from(_SAMPLE_TEXTS),
        st.text(max_size=max_size),
        st.text(st.sampled_from("ab 日本🙂\n\t{}\"'\\"), max_size=max_size),
    )


def images(target: Target = "any") -> st.SearchStrategy[ImagePart]:
    """Inline images (bytes and a media type) and URL images."""
    url_media_type = st.one_of(st.none(), st.sampled_from(MEDIA_TYPES))
    urls = st.one_of(
        st.sampled_from(_URLS),
        st.builds(
            "https://{}.example/{}".format,
            st.text(_LOWER, min_size=1, max_size=8),
            st.text(_LOWER + "0123456789/", max_size=12),
        ),
    )
    return st.one_of(
        st.builds(ImagePart, media_type=st.sampled_from(MEDIA_TYPES), data=st.binary(max_size=48)),
        st.builds(ImagePart, url=urls, media_type=url_media_type if target == "any" else st.none()),
    )


def content_parts(
    target: Target = "any", *, with_images: bool = True
) -> st.SearchStrategy[ContentPart]:
    """A text part (two draws in three) or an image."""
    text = st.builds(TextPart, text=texts())
    return st.one_of(text, text, images(target)) if with_images else text


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value (finite floats only, so that it survives a round trip)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        texts(12),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(texts(8), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


def json_objects() -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object: what Anthropic `tool_use.input` holds."""
    return st.dictionaries(texts(10), json_values(), max_size=4)


def canonical_json(value: Any) -> str:
    """`value` spelled the way `wire.from_anthropic` writes tool-call arguments."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments(target: Target = "any") -> st.SearchStrategy[str]:
    """Tool-call argument text: canonical objects for Anthropic, any text otherwise."""
    canonical = json_objects().map(canonical_json)
    if _object_arguments(target):
        return canonical
    return st.one_of(
        canonical,
        json_objects().map(lambda o: json.dumps(o, indent=2)),  # spaced, escaped non-ASCII
        json_values().map(json.dumps),  # valid JSON, not always an object
        st.sampled_from(("", "{", '{"path": "/tmp/', "NaN", "null", "[1, 2]")),
        texts(),
    )


def tool_call_ids() -> st.SearchStrategy[str]:
    """Ids shaped like the providers' (`call_…`, `toolu_…`)."""
    prefixes = st.sampled_from(("call_", "toolu_01", "fc_", ""))
    suffixes = st.text(_ALNUM, min_size=1, max_size=10)
    return st.builds(str.__add__, prefixes, suffixes)


def tool_calls(target: Target = "any") -> st.SearchStrategy[ToolCall]:
    """One tool call."""
    invented = st.builds(str.__add__, st.sampled_from(_LOWER), st.text(_ALNUM + "_", max_size=15))
    names = st.one_of(st.sampled_from(_TOOL_NAMES), invented)
    return st.builds(ToolCall, id=tool_call_ids(), name=names, arguments=arguments(target))


def system_messages(target: Target = "any") -> st.SearchStrategy[Message]:
    """A system message: one text part for Anthropic, 0..3 parts otherwise."""
    if _strict_system(target):
        return st.builds(Message.system, texts())
    parts = st.lists(st.builds(TextPart, text=texts()), max_size=3)
    return st.one_of(
        st.builds(Message.system, texts()),
        parts.map(lambda ps: Message(role="system", parts=tuple(ps))),
    )


def user_messages(target: Target = "any") -> st.SearchStrategy[Message]:
    """A user message: a plain string, or 0..3 text and image parts."""
    return st.one_of(
        st.builds(Message.user, texts()),
        st.lists(content_parts(target), max_size=3).map(Message.user),
    )


@st.composite
def assistant_messages(
    draw: st.DrawFn, target: Target = "any", *, max_texts: int = 2, max_calls: int = 3
) -> Message:
    """An assistant message: 0..`max_texts` text parts, then 0..`max_calls` parallel calls."""
    text = [TextPart(text=draw(_memo(texts))) for _ in range(draw(st.integers(0, max_texts)))]
    calls: dict[str, ToolCall] = {}
    for _ in range(draw(st.integers(0, max_calls))):
        call: ToolCall = draw(_memo(tool_calls, target))
        calls.setdefault(call.id, call)
    return Message(role="assistant", parts=(*text, *calls.values()))


def _result_bodies(target: Target) -> st.SearchStrategy[tuple[tuple[ContentPart, ...], bool]]:
    plain = texts().map(lambda text: ((TextPart(text=text),), False))
    parts = content_parts(target, with_images=_rich_results(target))
    errors = st.booleans() if _rich_results(target) else st.just(False)
    return st.one_of(plain, st.tuples(st.lists(parts, max_size=3).map(tuple), errors))


def _tool_message(call_id: str, body: tuple[tuple[ContentPart, ...], bool]) -> Message:
    result = ToolResult(call_id=call_id, content=body[0], is_error=body[1])
    return Message(role="tool", parts=(result,))


def tool_messages(
    target: Target = "any", *, call_id: str | None = None
) -> st.SearchStrategy[Message]:
    """A tool message answering `call_id` (drawn if not given)."""
    ids = st.just(call_id) if call_id is not None else tool_call_ids()
    return st.builds(_tool_message, ids, _result_bodies(target))


def messages(target: Target = "any") -> st.SearchStrategy[Message]:
    """Any single message of any role."""
    return st.one_of(
        system_messages(target),
        user_messages(target),
        assistant_messages(target),
        tool_messages(target),
    )


def _non_system(target: Target) -> st.SearchStrategy[Message]:
    return st.one_of(user_messages(target), assistant_messages(target), tool_messages(target))


@st.composite
def message_lists(draw: st.DrawFn, target: Target = "any", *, max_size: int = 8) -> list[Message]:
    """Unstructured transcripts (no call/result pairing); Anthropic keeps system leading."""
    if not _strict_system(target):
        return list(draw(st.lists(_memo(messages, target), max_size=max_size)))
    head = [draw(_memo(system_messages, target)) for _ in range(draw(st.integers(0, 2)))]
    return head + draw(st.lists(_memo(_non_system, target), max_size=max_size))


def _fresh_id(draw: st.DrawFn, used: set[str]) -> str:
    call_id: str = draw(_memo(tool_call_ids))
    if call_id in used:
        call_id = f"{call_id}_{len(used)}"
    used.add(call_id)
    return call_id


def _group(draw: st.DrawFn, target: Target, used: set[str], max_calls: int) -> list[Message]:
    text = [TextPart(text=draw(_memo(texts)))] if draw(st.booleans()) else []
    calls = []
    for _ in range(draw(st.integers(1, max_calls))):
        call: ToolCall = draw(_memo(tool_calls, target))
        calls.append(ToolCall(id=_fresh_id(draw, used), name=call.name, arguments=call.arguments))
    results = [_tool_message(c.id, draw(_memo(_result_bodies, target))) for c in calls]
    return [Message(role="assistant", parts=(*text, *calls)), *results]


@st.composite
def tool_call_groups(
    draw: st.DrawFn, target: Target = "any", *, max_calls: int = 3
) -> list[Message]:
    """One round: an assistant message with 1..`max_calls` calls, then a result for each."""
    return _group(draw, target, set(), max_calls)


@st.composite
def agent_transcripts(
    draw: st.DrawFn,
    target: Target = "any",
    *,
    max_rounds: int = 5,
    restored_orphans: bool = False,
) -> list[Message]:
    """A realistic session: system prompt, the user's goal, rounds of calls and results.

    Rounds are mostly tool-call groups, sometimes an assistant reply or a user interjection
    (and, where the target allows it, a mid-session system reminder). With `restored_orphans`
    the session after the system prompt starts with tool results whose calls are missing, as a
    compacted projection can. Tool call ids are unique across the session.
    """
    used: set[str] = set()
    systems = draw(st.integers(0 if restored_orphans else 1, 2))
    out: list[Message] = [draw(_memo(system_messages, target)) for _ in range(systems)]
    if restored_orphans:
        for _ in range(draw(st.integers(1, 3))):
            out.append(_tool_message(_fresh_id(draw, used), draw(_memo(_result_bodies, target))))
    else:
        out.append(draw(_memo(user_messages, target)))
    for _ in range(draw(st.integers(0, max_rounds))):
        kind = draw(st.integers(0, 9))
        if kind <= 5:
            out += _group(draw, target, used, 3)
        elif kind <= 7:
            out.append(Message.assistant(draw(_memo(texts))))
        elif kind == 8 or _strict_system(target):
            out.append(draw(_memo(user_messages, target)))
        else:
            out.append(draw(_memo(system_messages, target)))
    return out


def transcripts(target: Target = "any", *, max_rounds: int = 5) -> st.SearchStrategy[list[Message]]:
    """Realistic agent sessions whose calls and results pair up (see `agent_transcripts`)."""
    return agent_transcripts(target, max_rounds=max_rounds)
