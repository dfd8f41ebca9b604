from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import ImagePart, Message, TextPart, ToolCall, ToolResult
from steerable_compaction.compaction import (
    FOLD_PREFIX,
    FOLDED_ARGUMENT_PREFIX,
    fold_arguments,
    fold_largest,
    fold_marker,
    image_pointer,
    is_folded,
    prune,
    select_regions,
)

from .compaction_helpers import PNG, est, image_message, session, write_session
from .strategies import agent_transcripts


def run(messages: list[Message], **overrides: object):  # type: ignore[no-untyped-def]
    regions = select_regions(messages, 6)
    kw: dict[str, object] = {
        "start": regions.head_end,
        "horizon": regions.tail_start,
        "keep_last_tool_results": 2,
        "fold_excerpt_chars": 160,
        "image_offload": True,
        "keep_last_images": 1,
        "estimate": est,
    }
    kw.update(overrides)
    return prune(messages, **kw)  # type: ignore[arg-type]


def test_r17_fold_marker_keeps_tool_name_size_seq_and_head_tail_excerpt() -> None:
    """R17: a fold keeps the tool name, original size, record seq and `fold_excerpt_chars`.

    The seq is named in the provenance format the history tools read (`[history seq N]`).
    """
    body = "HEAD" + "m" * 5_000 + "TAIL"
    folded = fold_marker(
        ToolResult(call_id="c", content=(TextPart(text=body),), is_error=True),
        tool_name="read_file",
        seq=41,
        excerpt_chars=10,
    )
    assert folded.call_id == "c"
    assert folded.is_error
    assert folded.text == (
        "[folded tool result: read_file, 5,008 chars; the full result is in the record] "
        "[history seq 41]\n"
        "HEADm\n…\nmTAIL"
    )


def test_r17_short_results_are_kept_whole_in_the_marker() -> None:
    """A result shorter than the excerpt budget is quoted in full after the header."""
    folded = fold_marker(
        ToolResult(call_id="c", content=(TextPart(text="tiny"),)),
        tool_name="ls",
        seq=None,
        excerpt_chars=160,
    )
    assert folded.text.endswith("the full result is in the record]\ntiny")


def test_r17_folds_results_older_than_keep_last_tool_results_in_the_middle() -> None:
    """R17: every middle result but the newest `keep_last_tool_results` is folded, with seqs."""
    messages = session(8)
    seqs = [100 + i for i in range(len(messages))]
    result = run(messages, seqs=seqs)
    regions = select_regions(messages, 6)
    folded = [e.index for e in result.edits]
    expected = [
        i for i in range(regions.head_end, regions.tail_start) if messages[i].role == "tool"
    ]
    assert folded == expected
    assert result.folded == len(expected)
    for i in folded:
        text = result.messages[i].text
        assert text.startswith(f"{FOLD_PREFIX}read_file, ")
        assert f"[history seq {100 + i}]" in text
    assert result.saved_tokens == sum(est(messages[i]) - est(result.messages[i]) for i in folded)


def test_r18_fold_never_touches_the_tail_horizon_regression() -> None:
    """R18 regression: with 3 results in the 6-message tail and keep 2, the 3rd stays raw.

    The spec's bug: fold kept the newest 2 results while the tail kept 3, so a tail result was
    folded and the next summary replayed the folded text, losing its needle for good.
    """
    messages = session(8)
    regions = select_regions(messages, 6)
    tail_results = [
        i for i in range(regions.tail_start, len(messages)) if messages[i].role == "tool"
    ]
    assert len(tail_results) == 3
    result = run(messages)
    assert all(e.index < regions.tail_start for e in result.edits)
    for i in tail_results:
        assert result.messages[i] is messages[i]


def test_prune_is_idempotent_and_skips_folds_that_would_not_shrink() -> None:
    """Pruning a pruned transcript changes nothing; tiny results are not 'folded' bigger."""
    messages = session(8)
    once = run(messages)
    twice = run(list(once.messages))
    assert not twice.changed
    assert all(is_folded(once.messages[e.index]) for e in once.edits)
    tiny = session(8, body_chars=12)
    assert not run(tiny).changed


def test_r19_old_images_become_pointers_and_the_newest_are_kept() -> None:
    """R19: images older than the newest `keep_last_images` become hash/media/round pointers."""
    messages = [*session(2), image_message("a"), *session(3)[2:], image_message("b")]
    regions = select_regions(messages, 2)
    rounds = list(range(len(messages)))
    result = run(messages, horizon=regions.tail_start, rounds=rounds)
    assert result.offloaded == 1
    (edit,) = [e for e in result.edits if e.index == 6]
    digest = hashlib.sha256(PNG + b"a").hexdigest()[:12]
    assert edit.message == Message.user(f"[image offloaded: {digest}, image/png, round 6]")
    seqs = [1000 + i for i in range(len(messages))]
    named = run(messages, horizon=regions.tail_start, rounds=rounds, seqs=seqs)
    (edit,) = [e for e in named.edits if e.index == 6]
    assert edit.message.text.endswith(", round 6] [history seq 1006]")
    assert result.messages[-1] is messages[-1]


def test_r19_image_offload_can_be_switched_off() -> None:
    """R19: `image_offload=False` keeps every image."""
    messages = [*session(2), image_message("a"), *session(3)[2:], image_message("b")]
    result = run(messages, image_offload=False, keep_last_tool_results=100)
    assert result.offloaded == 0
    assert not result.changed


def test_r19_fold_and_offload_each_follow_their_own_rule_inside_one_result() -> None:
    """A folded result keeps its images unless they are old enough to offload (R17 + R19)."""
    shot = ImagePart(media_type="image/png", data=PNG)
    messages = session(1)
    messages.append(Message.assistant("look"))
    messages[3] = Message.tool("call_0", [TextPart(text="y" * 3000), shot])
    messages += session(4)[2:]
    kept = run(messages)
    assert is_folded(kept.messages[3])
    assert kept.messages[3].images == (shot,)  # the newest image: kept even though folded
    assert kept.offloaded == 0
    newer = [*messages, image_message("newer")]
    result = run(newer, horizon=len(newer) - 6)
    folded = result.messages[3]
    assert is_folded(folded)
    assert not folded.images
    assert folded.tool_result is not None
    assert folded.tool_result.content[-1] == TextPart(text=image_pointer(shot, 0))
    assert result.offloaded == 1


def test_r19_url_images_and_unknown_media_types_get_pointers_too() -> None:
    """A URL image is hashed by its URL and named `unknown` when it has no media type."""
    pointer = image_pointer(ImagePart(url="https://example.com/a.png"), 4)
    digest = hashlib.sha256(b"https://example.com/a.png").hexdigest()[:12]
    assert pointer == f"[image offloaded: {digest}, unknown, round 4]"


def test_offload_inside_a_kept_tool_result_replaces_only_the_image() -> None:
    """An image in a result that is not folded is offloaded in place, keeping its text."""
    shot = ImagePart(media_type="image/jpeg", data=b"\xff\xd8jpeg")
    messages = session(3)
    messages[5] = Message.tool("call_1", [TextPart(text="screenshot"), shot])
    messages += [image_message("new"), Message.assistant("seen")]
    result = run(messages, keep_last_tool_results=10, horizon=len(messages) - 2)
    assert result.messages[5] == Message.tool(
        "call_1", [TextPart(text="screenshot"), TextPart(text=image_pointer(shot, 0))]
    )


def test_protected_indices_are_never_touched() -> None:
    """Indices in `protect` stay raw even inside the range."""
    messages = session(6)
    result = run(messages, start=2, horizon=len(messages), protect=set(range(len(messages))))
    assert not result.changed


@given(agent_transcripts(max_rounds=10), st.integers(0, 4), st.integers(0, 3))
def test_prune_only_edits_inside_its_range_and_keeps_roles_and_call_ids(
    messages: list[Message], keep_results: int, keep_images: int
) -> None:
    """Property: edits lie in [start, horizon), keep role and call id, and never add images."""
    regions = select_regions(messages, 4)
    result = run(
        messages,
        start=regions.head_end,
        horizon=regions.tail_start,
        keep_last_tool_results=keep_results,
        keep_last_images=keep_images,
    )
    for edit in result.edits:
        assert regions.head_end <= edit.index < regions.tail_start
        old, new = messages[edit.index], edit.message
        assert old.role == new.role
        if old.tool_result is not None:
            assert new.tool_result is not None
            assert new.tool_result.call_id == old.tool_result.call_id
        if old.role == "assistant" and old.tool_calls:  # its arguments folded, nothing else
            assert [(c.id, c.name) for c in new.tool_calls] == [
                (c.id, c.name) for c in old.tool_calls
            ]
            assert new.text == old.text
            continue
        assert len(new.images) < len(old.images) or (old.tool_result and is_folded(new))
    assert result.messages[: regions.head_end] == tuple(messages[: regions.head_end])
    assert result.messages[regions.tail_start :] == tuple(messages[regions.tail_start :])


def test_keeping_more_results_than_exist_keeps_them_all() -> None:
    """Regression: `keep_last_tool_results` above the number of results folds nothing."""
    messages = session(8)
    assert not run(messages, keep_last_tool_results=20, image_offload=False).changed
    assert not run(messages, keep_last_tool_results=8).changed
    everywhere = len(messages)
    assert (
        run(messages, keep_last_tool_results=0, horizon=everywhere).folded
        == run(messages, horizon=everywhere).folded + 2
        == 8
    )


def test_fold_arguments_keeps_every_key_and_folds_only_long_strings() -> None:
    """A call's long string values become marker + excerpt; the arguments stay a JSON object."""
    content = "HEAD" + "z" * 5_000 + "TAIL"
    arguments = json.dumps(
        {"path": "src/app.py", "content": content, "edits": [{"new": content}, {"old": "x"}]}
    )
    calls = [ToolCall(id="w1", name="write_file", arguments=arguments)]
    message = Message.assistant("Writing the module.", calls)
    folded = fold_arguments(message, seq=41, excerpt_chars=10)
    assert folded.text == message.text
    (call,) = folded.tool_calls
    assert (call.id, call.name) == ("w1", "write_file")
    value = call.parsed_arguments()
    assert list(value) == ["path", "content", "edits"]
    assert value["path"] == "src/app.py"
    assert value["edits"][1] == {"old": "x"}
    for folded_text in (value["content"], value["edits"][0]["new"]):
        assert folded_text == (
            f"{FOLDED_ARGUMENT_PREFIX}5,008 chars; the whole call is in the record] "
            "[history seq 41]\nHEADz\n…\nzTAIL"
        )
    assert fold_arguments(folded, seq=41, excerpt_chars=10) is folded  # folding again: no change


def test_fold_arguments_leaves_short_and_non_json_arguments_as_written() -> None:
    """Short strings, arguments that are not JSON and calls in `keep` keep their exact bytes."""
    long_text = "q" * 3_000
    calls = [
        ToolCall(id="a", name="run", arguments='{"cmd": "ls -la"}'),
        ToolCall(id="b", name="raw", arguments=long_text),  # not JSON
        ToolCall(id="c", name="put", arguments=json.dumps({"body": long_text})),
    ]
    message = Message.assistant(None, calls)
    assert fold_arguments(message, seq=None, excerpt_chars=100, keep={"c"}) is message
    folded = fold_arguments(message, seq=None, excerpt_chars=100)
    assert [c.arguments for c in folded.tool_calls[:2]] == [c.arguments for c in calls[:2]]
    assert folded.tool_calls[2].parsed_arguments()["body"].startswith(FOLDED_ARGUMENT_PREFIX)
    assert "[history seq" not in folded.tool_calls[2].arguments


def test_prune_folds_old_calls_arguments_but_not_those_whose_results_stay() -> None:
    """The calls of folded rounds lose their long arguments; kept rounds and the tail do not."""
    messages = write_session(8)
    seqs = [100 + i for i in range(len(messages))]
    result = run(messages, seqs=seqs, keep_last_tool_results=4)
    regions = select_regions(messages, 6)
    folded = {e.index for e in result.edits if messages[e.index].role == "assistant"}
    kept_ids = {m.tool_result.call_id for m in messages[-8:] if m.tool_result is not None}
    expected = {
        i
        for i in range(regions.head_end, regions.tail_start)
        if messages[i].tool_calls and messages[i].tool_calls[0].id not in kept_ids
    }
    assert folded == expected and expected
    for i in folded:
        (call,) = result.messages[i].tool_calls
        assert f"[history seq {100 + i}]" in call.parsed_arguments()["content"]
        assert est(result.messages[i]) < est(messages[i])
    assert not run(list(result.messages), seqs=seqs, keep_last_tool_results=4).changed


def test_fold_largest_folds_a_calls_long_arguments_as_a_last_resort() -> None:
    """Lossy beats stuck: the largest message first, a tool call's arguments included."""
    messages = write_session(3)
    call_index = max(range(len(messages)), key=lambda i: est(messages[i]))
    assert messages[call_index].tool_calls
    result = fold_largest(
        messages, candidates=[call_index], need=1, excerpt_chars=160, estimate=est
    )
    assert [e.index for e in result.edits] == [call_index]
    assert result.saved_tokens == est(messages[call_index]) - est(result.messages[call_index])
    assert result.saved_tokens > 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=900),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=8), _JSON, max_size=5), st.integers(0, 200))
def test_folded_arguments_are_storable_json_with_the_same_keys(value: object, chars: int) -> None:
    """Any JSON object: folding keeps it a UTF-8-encodable object of the same shape, once."""
    arguments = json.dumps(value)
    message = Message.assistant(None, [ToolCall(id="c", name="t", arguments=arguments)])
    folded = fold_arguments(message, seq=7, excerpt_chars=chars)
    (call,) = folded.tool_calls
    call.arguments.encode("utf-8")  # a lone surrogate in the input stays escaped
    after = call.parsed_arguments()

    def shape(v: object) -> object:
        if isinstance(v, dict):
            return {k: shape(x) for k, x in v.items()}
        if isinstance(v, list):
            return [shape(x) for x in v]
        return type(v).__name__

    assert shape(after) == shape(value)
    assert fold_arguments(folded, seq=7, excerpt_chars=chars) is folded


def test_a_lone_surrogate_in_folded_arguments_stays_escaped() -> None:
    """JSON may escape a lone surrogate (undecodable bytes); the fold must stay storable."""
    arguments = '{"name": "caf\\u00e9", "body": "\\ud800' + "x" * 1_000 + '"}'
    message = Message.assistant(None, [ToolCall(id="c", name="t", arguments=arguments)])
    (call,) = fold_arguments(message, seq=None, excerpt_chars=50).tool_calls
    call.arguments.encode("utf-8")
    value = call.parsed_arguments()
    assert value["name"] == "café"
    assert value["body"].startswith(FOLDED_ARGUMENT_PREFIX)
    assert "\ud800" in value["body"]


def test_a_folded_argument_is_not_folded_again_at_a_smaller_excerpt() -> None:
    """A tier change (smaller excerpt) leaves a folded string: its size and pointer stay true."""
    arguments = json.dumps({"content": "HEAD" + "z" * 5_000 + "TAIL"})
    message = Message.assistant(None, [ToolCall(id="w", name="write_file", arguments=arguments)])
    folded = fold_arguments(message, seq=41, excerpt_chars=300)
    assert len(folded.tool_calls[0].parsed_arguments()["content"]) > 2 * 50 + 200
    assert fold_arguments(folded, seq=41, excerpt_chars=50) is folded
    assert fold_arguments(folded, seq=None, excerpt_chars=0) is folded


@pytest.mark.parametrize(
    "arguments",
    [
        '{"limit": 1e400, "body": "BODY"}',  # overflows to infinity: re-encoded, not JSON
        '{"limit": NaN, "body": "BODY"}',  # Python's decoder accepts it; JSON does not
        '{"body": "short", "body": "BODY"}',  # a key twice: re-encoding would merge them
    ],
)
def test_fold_arguments_leaves_what_json_cannot_re_encode_as_written(arguments: str) -> None:
    """A non-finite number or a key twice: the call keeps its bytes rather than change meaning."""
    arguments = arguments.replace("BODY", "q" * 3_000)
    message = Message.assistant(None, [ToolCall(id="c", name="put", arguments=arguments)])
    assert fold_arguments(message, seq=3, excerpt_chars=50) is message


def test_a_lone_surrogate_escapes_only_itself_so_the_call_does_not_grow() -> None:
    """Other non-ASCII text stays as it was; escaping it all would make the fold a growth."""
    body = "\\ud800" + "日志" * 40 + "x" * 1_000
    arguments = '{"note": "' + "端口已开放" * 60 + '", "body": "' + body + '"}'
    message = Message.assistant(None, [ToolCall(id="c", name="t", arguments=arguments)])
    (call,) = fold_arguments(message, seq=None, excerpt_chars=50).tool_calls
    call.arguments.encode("utf-8")
    assert "端口已开放" * 60 in call.arguments
    assert "\\ud800" in call.arguments
    assert len(call.arguments) < len(arguments)
    assert call.parsed_arguments()["body"].startswith(FOLDED_ARGUMENT_PREFIX)


def test_fold_arguments_keeps_a_pinned_message_pinned() -> None:
    """A pinned call folded by the last rung of the ladder stays pinned for the next step."""
    arguments = json.dumps({"body": "q" * 3_000})
    message = Message(
        role="assistant",
        parts=(ToolCall(id="c", name="put", arguments=arguments),),
        pinned=True,
    )
    folded = fold_arguments(message, seq=None, excerpt_chars=50)
    assert folded is not message
    assert folded.pinned
