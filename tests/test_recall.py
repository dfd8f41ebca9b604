"""Tests for `steerable_compaction.recall`: what is searched, how it matches and ranks, reading.

The SQLite index and the tools have their own modules (`test_recall_fts.py`,
`test_recall_tools.py`); everything here runs on the in-memory index.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction.errors import RecallError
from steerable_compaction.messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from steerable_compaction.recall import (
    HistoryHit,
    HistoryPage,
    hidden_seqs,
    parse_query,
    prepare_index,
    read_history,
    search,
    search_history,
)
from steerable_compaction.recall.memory import WordIndex
from steerable_compaction.recall.text import normalize, rank, render, snippet
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
)
from steerable_compaction.tokens import estimate_tokens


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def summarize(record: Record, start: int, end: int, *kept: Message) -> None:
    """Replace projection indices [start, end) with a summary (and `kept` messages)."""
    replacement = (Message.user("[summary of earlier work]"), *kept)
    record.append(
        CompactionBoundary(
            action="summarize",
            pre_tokens=1000,
            post_tokens=100,
            replacement_count=len(replacement),
            span=(start, end),
            replacement=replacement,
        )
    )


def fold(record: Record, index: int) -> None:
    """Replace the message at projection `index` with a fold marker."""
    old = record.projection.messages[index]
    marker = Message.tool(old.tool_result.call_id, "[folded]") if old.tool_result else None
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=1000,
            post_tokens=900,
            replacement_count=0,
            edits=(Edit(index=index, message=marker or Message.user("[folded]")),),
        )
    )


def session(record: Record) -> Record:
    """Seqs 0-7 are messages; 8 summarizes projection [1, 6), keeping seq 1 verbatim."""
    task = Message.user("Fix the ConnectionRefusedError on port 5432 in db/pool.py")
    record.append_message(Message.system("You are a coding agent."))  # 0
    record.append_message(task)  # 1
    record.append_message(
        Message.assistant("Reading.", [call("c1", "read_file", path="db/pool.py")])
    )  # 2
    record.append_message(
        Message.tool("c1", "def connect():\n    raise ConnectionRefusedError('port 5432')\n")
    )  # 3
    record.append_message(
        Message.assistant("The pool retries port 5432 forever. 数据库连接失败。")
    )  # 4
    record.append_message(Message.user("ログを確認してください。エラーは接続です。"))  # 5
    record.append_message(Message.assistant("Checking the log."))  # 6
    record.append_message(Message.user("continue with port 5432"))  # 7
    summarize(record, 1, 6, task)  # 8
    return record


# -- text: the query, the match rule, rendering, ranking, snippets ---------------------------------


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("port 5432", ("port", "5432")),
        ("  Port   PORT  ", ("port",)),
        ('"connection refused" pool', ("connection refused", "pool")),
        ('say "hello   World', ("say", "hello world")),
        ("foo AND bar* OR (baz) -qux", ("foo", "and", "bar*", "or", "(baz)", "-qux")),
        ("STRASSE Straße", ("strasse",)),
        ("API接口 数据库", ("api", "接口", "数据库")),
        ("错误\uff0c数据库\u3002ログ", ("错误", "数据库", "ログ")),  # full-width comma, full stop
        ('"数据库 连接"', ("数据库 连接",)),
        ("status=500 db/pool.py:12", ("status=500", "db/pool.py:12")),
    ],
)
def test_parse_query_splits_words_phrases_and_script_runs(
    query: str, terms: tuple[str, ...]
) -> None:
    """Whitespace splits words, quotes group, CJK runs split from others; nothing is an operator."""
    assert parse_query(query) == terms


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "no words"),
        ('  "" "  " ', "no words"),
        ('"""', "no words"),
        ("a\x00b", "NUL"),
        ("x" * 10_001, "10,001 characters"),
        (" ".join(f"w{i}" for i in range(33)), "33 distinct terms"),
        (42, "must be a string, got int"),
        (None, "must be a string, got NoneType"),
    ],
)
def test_parse_query_refuses_bad_queries_with_a_reason(query: object, reason: str) -> None:
    """Empty, quote-only, NUL, huge, term-laden and non-string queries raise a named error."""
    with pytest.raises(RecallError, match=reason):
        parse_query(query)


def test_parse_query_accepts_the_longest_allowed_query() -> None:
    """A query of exactly 10,000 characters is searched."""
    assert parse_query("x" * 10_000) == ("x" * 10_000,)


def test_render_shows_text_calls_images_and_errors_readably() -> None:
    """Text joins as `Message.text` does; calls and images get lines; no image bytes appear."""
    message = Message.assistant("Look", [call("c1", "grep", pattern="x"), call("c2", "ls")])
    assert render(message) == (
        'Look\n[tool call grep (id c1)] {"pattern": "x"}\n[tool call ls (id c2)] {}'
    )
    image = ImagePart(media_type="image/png", data=b"\x89PNG" * 100)
    user = Message.user([TextPart(text="a"), TextPart(text="b"), image, TextPart(text="c")])
    assert render(user) == "ab\n[image: image/png, 400 bytes]\nc"
    remote = Message.user([ImagePart(url="https://x.test/a.png")])
    assert render(remote) == "[image: https://x.test/a.png]"
    failed = Message(
        role="tool",
        parts=(ToolResult(call_id="c1", content=(TextPart(text="boom"), image), is_error=True),),
    )
    assert render(failed) == "[tool error] boom\n[image: image/png, 400 bytes]"
    assert render(Message.user("plain\ntext")) == "plain\ntext"


def test_normalize_folds_case_and_collapses_whitespace() -> None:
    """Case-folded (ß → ss), whitespace runs one space, none at the ends."""
    assert normalize("  Straße\n\tIST   groß ") == "strasse ist gross"


def test_rank_prefers_more_occurrences_then_newer() -> None:
    """More occurrences of a term rank higher; equal scores put the newer message first."""
    found = [(1, "port a"), (2, "port a"), (3, "port port port a")]
    assert rank(found, ("port",)) == [3, 2, 1]


def test_rank_weighs_rarer_terms_more() -> None:
    """Extra occurrences of a term rare across the matches beat those of a common one."""
    common = "timeout " * 6
    found = [
        (1, common + "5432 5432 5432"),  # the rare term three times
        (2, common + "timeout timeout 5432"),  # the common term more often
        (3, common + "5432"),
    ]
    assert rank(found, ("timeout", "5432"))[0] == 1


def test_rank_of_nothing_is_empty() -> None:
    """No matches rank to an empty list."""
    assert rank([], ("x",)) == []


def test_snippet_holds_the_most_distinctive_match_and_marks_clipping() -> None:
    """The snippet centres on the rarest term's first match, clipped with `…` on both sides."""
    text = "port " * 200 + "ConnectionRefusedError at pool.py" + " filler" * 200
    shown = snippet(text, ("port", "connectionrefusederror"))
    assert "ConnectionRefusedError" in shown
    assert shown.startswith("…") and shown.endswith("…")
    assert len(shown) <= 242


def test_snippet_of_a_short_text_is_the_whole_text_on_one_line() -> None:
    """A short message shows whole, its line breaks as spaces."""
    assert snippet("def f():\n    return 1", ("return",)) == "def f(): return 1"


def test_snippet_finds_matches_that_case_folding_lengthens() -> None:
    """A match found only through folding (ß matches ss) is still inside the snippet."""
    text = "x" * 300 + " Die Straße ist lang " + "y" * 300
    assert "Straße" in snippet(text, ("strasse",))


def test_snippet_near_the_end_shows_what_comes_before() -> None:
    """A match at the end of a long text fills the snippet with the text before it."""
    text = "a " * 400 + "needle"
    shown = snippet(text, ("needle",))
    assert shown.endswith("needle") and shown.startswith("…") and len(shown) > 200


# -- what is searched ---------------------------------------------------------------------------


def test_only_messages_the_projection_no_longer_shows_are_hits() -> None:
    """Summarized messages are hits; visible ones and ones kept verbatim in a summary are not."""
    record = session(MemoryRecord())
    assert hidden_seqs(record) == [2, 3, 4, 5]  # seq 1 is kept verbatim, 6 and 7 are the tail
    hits = search_history(record, "port 5432")
    assert {hit.seq for hit in hits} == {3, 4}


def test_a_folded_message_becomes_a_hit() -> None:
    """A fold edit changes the message at its seq: the original is hidden and searchable."""
    record = MemoryRecord()
    record.append_message(Message.user("go"))
    record.append_message(Message.assistant("", [call("c1", "bash", cmd="make")]))
    record.append_message(Message.tool("c1", "error: missing symbol frobnicate_v2"))
    assert search_history(record, "frobnicate_v2") == []
    fold(record, 2)
    [hit] = search_history(record, "frobnicate_v2")
    assert (hit.seq, hit.role, hit.tool_name) == (2, "tool", "bash")


def test_hits_carry_role_tool_name_snippet_and_tokens() -> None:
    """A hit names the call a result answers and prices the message with `estimate_tokens`."""
    record = session(MemoryRecord())
    [hit] = search_history(record, "connect():")
    message = record.history()[3].event.message  # type: ignore[union-attr]
    assert hit == HistoryHit(
        seq=3,
        role="tool",
        tool_name="read_file",
        snippet="def connect(): raise ConnectionRefusedError('port 5432')",
        tokens=estimate_tokens(message),
    )


def test_a_reused_call_id_names_the_newest_call() -> None:
    """Providers that reuse call ids: a result answers the newest earlier call with its id."""
    record = MemoryRecord()
    record.append_message(Message.user("go"))
    record.append_message(Message.assistant("", [call("call_0", "grep")]))
    record.append_message(Message.tool("call_0", "first result alpha"))
    record.append_message(Message.assistant("", [call("call_0", "bash")]))
    record.append_message(Message.tool("call_0", "second result alpha"))
    record.append_message(Message.tool("orphan", "third result alpha"))
    summarize(record, 0, 6)
    names = {hit.seq: hit.tool_name for hit in search_history(record, "alpha")}
    assert names == {2: "grep", 4: "bash", 5: None}


def test_results_of_history_tools_are_never_hits() -> None:
    """A `history_search` / `history_read` result repeats old text: it is not found again."""
    record = MemoryRecord()
    record.append_message(Message.user("secret code 918273"))
    record.append_message(Message.assistant("", [call("h1", "history_search", query="918273")]))
    record.append_message(Message.tool("h1", "[seq 0] user: secret code 918273"))
    record.append_message(Message.assistant("", [call("h2", "history_read", seq=0)]))
    record.append_message(Message.tool("h2", "secret code 918273"))
    summarize(record, 0, 5)
    assert [hit.seq for hit in search_history(record, "918273")] == [0]


def test_reminders_and_events_are_not_searched() -> None:
    """Only raw messages are searched: summaries and fold markers are not hits."""
    record = session(MemoryRecord())
    assert search_history(record, "[summary of earlier work]") == []


def test_chinese_and_japanese_terms_match_inside_runs() -> None:
    """A CJK term matches as a substring; two-character words work beside longer terms."""
    record = session(MemoryRecord())
    assert [h.seq for h in search_history(record, "连接失败")] == [4]
    assert [h.seq for h in search_history(record, "数据库 pool")] == [4]
    assert [h.seq for h in search_history(record, "エラー")] == [5]
    assert [h.seq for h in search_history(record, "接続 ログ")] == [5]


def test_a_query_of_short_terms_alone_scans() -> None:
    """Two-character terms alone (too short for trigrams) still find their messages."""
    record = session(MemoryRecord())
    assert [h.seq for h in search_history(record, "连接")] == [4]
    assert [h.seq for h in search_history(record, "ロ グ")] == [5]  # both present
    assert [h.seq for h in search_history(record, '"ロ グ"')] == []  # but not as a phrase
    assert [h.seq for h in search_history(record, '"を確"')] == [5]


def test_the_short_term_scan_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short-term-only queries check the newest `SCAN_LIMIT` hidden messages, no more."""
    record = MemoryRecord()
    for i in range(6):
        record.append_message(Message.user(f"ab n{i:03d}"))
    summarize(record, 0, 6)
    monkeypatch.setattr(search, "SCAN_LIMIT", 4)
    assert sorted(h.seq for h in search_history(record, "ab", limit=10)) == [2, 3, 4, 5]
    assert [h.seq for h in search_history(record, "ab n000")] == [0]  # indexed: no bound


def test_ranking_considers_the_newest_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `RANK_WINDOW` matches, older ones are left out of the ranking."""
    record = MemoryRecord()
    record.append_message(Message.user("needle " * 10))
    for i in range(5):
        record.append_message(Message.user(f"needle {i}"))
    summarize(record, 0, 6)
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    assert [h.seq for h in search_history(record, "needle", limit=10)] == [5, 4, 3]


def test_phrases_match_across_any_whitespace_but_not_across_words() -> None:
    """A phrase matches its words separated by any whitespace run, in order and adjacent."""
    record = MemoryRecord()
    record.append_message(Message.user("connection\n   refused by host"))
    record.append_message(Message.user("refused connection"))
    record.append_message(Message.user("connection was refused"))
    summarize(record, 0, 3)
    assert [h.seq for h in search_history(record, '"connection refused"')] == [0]
    assert {h.seq for h in search_history(record, "connection refused")} == {0, 1, 2}


def test_terms_match_inside_words_case_insensitively() -> None:
    """Identifiers are found by any part of them, in any case."""
    record = session(MemoryRecord())
    assert [h.seq for h in search_history(record, "REFUSEDerror")] == [3]
    assert [h.seq for h in search_history(record, "pool.py")] == [2]


def test_operator_and_quote_laden_queries_are_plain_text() -> None:
    """Operators and stray quotes are searched as text: no error, no special meaning."""
    record = MemoryRecord()
    record.append_message(Message.user("use a AND b OR (c*) in the filter"))
    record.append_message(Message.user("use a filter"))
    summarize(record, 0, 2)
    assert [h.seq for h in search_history(record, "AND (c*)")] == [0]
    assert [h.seq for h in search_history(record, 'filter "')] == [1, 0]
    assert search_history(record, "NOT filter") == []


def test_search_limit_is_validated_and_respected() -> None:
    """`limit` caps the hits; a limit outside 1..50 raises `RecallError`."""
    record = session(MemoryRecord())
    assert len(search_history(record, "port", limit=1)) == 1
    for bad in (0, 51, True, 2.0, "3"):
        with pytest.raises(RecallError, match="limit"):
            search_history(record, "port", limit=bad)  # type: ignore[arg-type]


def test_the_index_follows_appends_reading_only_new_entries() -> None:
    """Each search indexes only what was appended since the last one (O(new entries))."""
    record = session(MemoryRecord())
    assert search_history(record, "frobnicate") == []
    words: WordIndex = search._state(record).words  # type: ignore[assignment]
    assert words.done == len(record)
    record.append_message(Message.user("frobnicate the widget"))
    record.append_message(Message.assistant("ok"))
    summarize(record, 5, 6)
    seen: list[int] = []
    original = WordIndex.update

    def spy(
        self: WordIndex, entries: object, spill_directory: object = None, **options: object
    ) -> None:
        seen.append(self.done)
        original(self, entries, spill_directory, **options)  # type: ignore[arg-type]

    try:
        WordIndex.update = spy  # type: ignore[method-assign]
        assert [h.seq for h in search_history(record, "frobnicate")] == [9]
    finally:
        WordIndex.update = original  # type: ignore[method-assign]
    assert seen == [9]


def test_prepare_index_builds_the_memory_index_at_once() -> None:
    """`prepare_index` reads every entry now, so the first search reads nothing more."""
    record = session(MemoryRecord())
    prepare_index(record)
    words = search._state(record).words
    assert words is not None and words.done == len(record)


def test_jsonl_search_is_rebuilt_on_open_and_drops_a_torn_line(tmp_path: Path) -> None:
    """A reopened JSONL record finds what it holds, and nothing of a torn final line."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        session(record)
        before = search_history(record, "port")
    with path.open("ab") as fh:
        fh.write(b'{"v":3,"seq":9,"kind":"message","message":{"role":"user","parts":[{"ty')
    with JsonlRecord(path, readonly=True) as again:
        assert search_history(again, "port") == before
        assert search_history(again, "connect") != []


# -- reading ------------------------------------------------------------------------------------


def test_read_returns_the_exact_content_in_pages() -> None:
    """Pages concatenate to the rendered message; each stays within `max_tokens`."""
    record = MemoryRecord()
    body = "".join(f"line {i}: value={i * 7919}\n" for i in range(400))
    record.append_message(Message.user("go"))
    record.append_message(Message.assistant("", [call("c1", "cat", path="big.log")]))
    record.append_message(Message.tool("c1", body))
    summarize(record, 0, 3)
    pages: list[HistoryPage] = []
    offset: int | None = 0
    while offset is not None:
        page = read_history(record, 2, offset=offset, max_tokens=300)
        assert estimate_tokens(page.text) <= 300 and page.text
        pages.append(page)
        offset = page.next_offset
    assert "".join(p.text for p in pages) == body
    assert len(pages) > 3
    assert all(
        (p.seq, p.role, p.tool_name, p.total_chars) == (2, "tool", "cat", len(body)) for p in pages
    )
    assert [p.offset for p in pages[1:]] == [p.next_offset for p in pages[:-1]]


def test_read_describes_images_without_their_bytes() -> None:
    """An image reads as its media type and size; the bytes never appear."""
    record = MemoryRecord()
    record.append_message(
        Message.user([TextPart(text="see"), ImagePart(media_type="image/png", data=b"\x00" * 2048)])
    )
    record.append_message(Message.user("next"))
    summarize(record, 0, 1)
    page = read_history(record, 0)
    assert page.text == "see\n[image: image/png, 2,048 bytes]"
    assert page.next_offset is None and page.total_chars == len(page.text)


def test_read_an_empty_message() -> None:
    """A message without text reads as one empty page."""
    record = MemoryRecord()
    record.append_message(Message.assistant(""))
    record.append_message(Message.user("next"))
    summarize(record, 0, 1)
    assert read_history(record, 0) == HistoryPage(
        seq=0, role="assistant", tool_name=None, text="", offset=0, next_offset=None, total_chars=0
    )


@pytest.mark.parametrize(
    ("seq", "offset", "max_tokens", "reason"),
    [
        (99, 0, 100, "no entry with seq 99: this record's seqs run from 0 to 8"),
        (-1, 0, 100, "seq must be at least 0, got -1"),
        (True, 0, 100, "seq must be an integer"),
        ("3", 0, 100, "seq must be an integer"),
        (8, 0, 100, "seq 8 is a compaction_boundary event, not a message"),
        (1, 0, 100, "seq 1 is still in your context unchanged"),
        (7, 0, 100, "seq 7 is still in your context unchanged"),
        (3, -5, 100, "offset must be at least 0, got -5"),
        (3, 10_000, 100, "offset 10000 is past the end of seq 3, which has 61 characters"),
        (3, 61, 100, "offset 61 is past the end"),
        (3, 0, 15, "max_tokens must be at least 16"),
    ],
)
def test_read_refuses_what_it_cannot_read(
    seq: object, offset: object, max_tokens: object, reason: str
) -> None:
    """Unknown, negative, non-message, visible seqs and bad offsets raise with a reason."""
    record = session(MemoryRecord())
    with pytest.raises(RecallError, match=reason.replace("(", r"\(")):
        read_history(record, seq, offset=offset, max_tokens=max_tokens)  # type: ignore[arg-type]


def test_read_errors_point_to_the_nearest_hidden_messages() -> None:
    """A seq inside a provenance range that cannot be read names hidden neighbours to read."""
    record = session(MemoryRecord())
    with pytest.raises(RecallError) as boundary:
        read_history(record, 8)
    assert str(boundary.value) == (
        "seq 8 is a compaction_boundary event, not a message; the nearest hidden messages are seq 5"
    )
    with pytest.raises(RecallError) as visible:
        read_history(record, 1)
    assert str(visible.value).endswith("read it there; the nearest hidden messages are seq 2")
    with pytest.raises(RecallError) as alone:
        read_history(MemoryRecord([MessageAppended(message=Message.user("hi"))]), 0)
    assert str(alone.value) == "seq 0 is still in your context unchanged: read it there"


def test_a_page_holds_as_much_as_the_budget_allows() -> None:
    """A page ends where one more character would pass `max_tokens`."""
    record = MemoryRecord()
    record.append_message(Message.user("数据库连接失败。" * 40))
    record.append_message(Message.user("next"))
    summarize(record, 0, 1)
    page = read_history(record, 0, max_tokens=16)
    text = render(record.history()[0].event.message)  # type: ignore[union-attr]
    assert page.next_offset == len(page.text) > 0
    assert estimate_tokens(page.text) <= 16 < estimate_tokens(text[: len(page.text) + 1])


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_text_is_split_into_the_words_of_the_word_pattern(text: str) -> None:
    """The byte-map tokenizer of case-folded ASCII text finds exactly the `[a-z0-9_]+` runs."""
    import re

    from steerable_compaction.recall.memory import _tokens

    folded = text.casefold()
    assert _tokens(folded) == set(re.findall("[a-z0-9_]+", folded))


_MIXED = list("ab1_ -,.é中文的。\uff0cひらカナ한\u3005")  # words, CJK runs, CJK punctuation


@given(st.text(alphabet=st.sampled_from(_MIXED), max_size=40))
def test_a_text_is_split_into_its_words_and_its_cjk_characters(text: str) -> None:
    """Tokens are the words outside CJK runs (a run ends a word) and each CJK character."""
    import re

    from steerable_compaction.recall.memory import _tokens
    from steerable_compaction.recall.text import CJK

    folded = text.casefold()
    words = set(re.findall(f"[^\\W{CJK}]+", folded))
    chars = set("".join(re.findall(f"[{CJK}]+", folded)))
    assert _tokens(folded) == words | chars
