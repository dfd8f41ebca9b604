# ruff: noqa: RUF001, RUF002  (CJK statements use full-width punctuation on purpose)
"""The retention check and the provenance format (issue: the record as long-term memory)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import excerpt_summary, summary_message
from steerable_compaction.compaction.provenance import history_ref, parse_history_refs
from steerable_compaction.compaction.retention import (
    MESSAGE_CHARS,
    RETAINED_HEADING,
    Retention,
    RetentionIndex,
    retention_check,
)
from steerable_compaction.summaries import SummaryWriter
from steerable_compaction.tokens import estimate_tokens


def check(
    messages: list[Message], summary: str = "## Current Work\nreading", budget: int = 400
) -> Retention:
    seqs = [100 + i for i in range(len(messages))]
    return retention_check(
        messages,
        (0, len(messages)),
        summary,
        budget_tokens=budget,
        estimate_text=estimate_tokens,
        seqs=seqs,
    )


def test_provenance_references_round_trip() -> None:
    """One format for one seq and for a range; the parser reads back what was written."""
    assert history_ref(7) == "[history seq 7]"
    assert history_ref(12, 40) == "[history seq 12-40]"
    assert history_ref(40, 12) == "[history seq 12-40]"
    assert history_ref(None) == ""
    text = f"fold {history_ref(7)} and summary {history_ref(12, 40)}"
    assert parse_history_refs(text) == [(7, 7), (12, 40)]
    assert parse_history_refs("[history seq x]") == []


def test_stated_facts_the_summary_lacks_are_kept_with_their_seq() -> None:
    """A statement with a value, an error name, a URL: kept as stated, naming its message."""
    messages = [
        Message.user("By the way, the deploy freeze window is 14:30-16:00 this week."),
        Message.tool("c1", "note: the payment retry limit is 48213 for every tenant"),
        Message.tool("c2", "The run failed with a KeyError raised in the request handler."),
        Message.tool("c3", "See https://status.example.test/incidents/4412 for the timeline."),
    ]
    result = check(messages)
    assert result.block.startswith(RETAINED_HEADING + "\n")
    lines = result.block.splitlines()[1:]
    assert any("48213" in line and line.endswith("[history seq 101]") for line in lines)
    assert any("KeyError" in line and "[history seq 102]" in line for line in lines)
    assert any("14:30-16:00" in line and "[history seq 100]" in line for line in lines)
    assert any("https://status.example.test/incidents/4412" in line for line in lines)
    assert result.found == len(result.kept) == 4 and result.dropped == 0


def test_what_the_summary_already_holds_is_not_repeated() -> None:
    """An atom whose value appears in the summary is not retained."""
    messages = [Message.tool("c1", "note: the payment retry limit is 48213 for every tenant")]
    assert check(messages, summary="The retry limit is 48213.").block == ""


def test_code_data_rows_and_repeated_shapes_are_left_to_the_history_tools() -> None:
    """Source code, bare `KEY=value` rows and templated log lines are not stated facts."""
    code = "\n".join(f"    worker_{i} = pool.lease(bucket, {100 + i})" for i in range(5))
    config = "\n".join(f"CACHE_FIELD_{i}={1000 + i}" for i in range(5))
    logs = "\n".join(
        f"2025-03-12T12:27:{10 + i}Z INFO web-{i} drops payload {5000 + i} in {90 + i}ms"
        for i in range(6)
    )
    messages = [Message.tool("c1", code), Message.tool("c2", config), Message.tool("c3", logs)]
    assert check(messages).found == 0


def test_a_clock_time_is_no_stated_value() -> None:
    """The colons of `09:42:33` separate no key from a value: a log line stays a data row.

    Two log lines (too few to count as a repeated shape) and one stated fact: read as
    `key: value`, each timestamp ranked as a fact and crowded the statement out of a small
    block.
    """
    logs = (
        "2025-03-07T02:42:33Z DEBUG db-5 reads session 58834 in 61ms\n"
        "2025-03-07T19:29:32Z WARN  sync-6 release 4374 failed: window error code 432"
    )
    messages = [
        Message.tool("c1", logs),
        Message.tool("c2", "note: the deploy freeze end date is 2025-06-27"),
    ]
    result = check(messages)
    logged = [atom for atom in result.kept if "db-5" in atom.clause or "sync-6" in atom.clause]
    assert logged and all(atom.kind == "number" for atom in logged)
    stated = "- note: the deploy freeze end date is 2025-06-27 [history seq 101]\n"
    one_line = estimate_tokens(f"{RETAINED_HEADING}\n") + estimate_tokens(stated)
    assert "2025-06-27" in check(messages, budget=one_line).block


def test_a_kept_log_record_drops_its_timestamp_and_plain_level() -> None:
    """A retained log line keeps its statement; a warning or an error keeps its level."""
    messages = [
        Message.tool(
            "c1",
            "2025-03-14T09:49:15Z INFO  ops-1 note: the deploy freeze end date is 2025-06-27\n"
            "[2025-03-14 09:50:02,117] ERROR the export failed with a TimeoutError on shard-12a",
        )
    ]
    clauses = sorted(atom.clause for atom in check(messages).kept)
    assert clauses == [
        "ERROR the export failed with a TimeoutError on shard-12a",
        "ops-1 note: the deploy freeze end date is 2025-06-27",
    ]


def test_a_host_and_port_is_still_a_stated_value() -> None:
    """Digits that end a name before a colon are no clock time: `redis-2:6379` states a port."""
    for said, value in (
        ("the cache primary redis-2:6379 was promoted by the failover", "6379"),
        ("we moved the leader to node12:9000 after the outage", "9000"),
        ("the service listens on port:8443 for the admin console", "8443"),
    ):
        kept = check([Message.tool("c1", said)]).kept
        assert (value, "fact") in [(atom.value, atom.kind) for atom in kept], said


def test_a_date_a_user_states_is_kept() -> None:
    """Only a log record's lead (a timestamp with seconds) is dropped, not a stated date."""
    said = "2025-03-07 10:00 the deploy freeze starts and the ticket is RBK-7373"
    (atom,) = check([Message.user(said)]).kept
    assert atom.clause == said


def test_chinese_and_japanese_statements_are_facts() -> None:
    """A value stated after `：`, 是, 为 or は is an atom, in CJK text too."""
    messages = [
        Message.tool("c1", "说明：值班别名是 oncall-amber-442，请留意。"),
        Message.tool("c2", "補足：障害チケット番号は INC-76612 に変更済み。"),
        Message.tool("c3", "备注：发布代号为 onyx-quartz-46。"),
    ]
    block = check(messages).block
    for value in ("oncall-amber-442", "INC-76612", "onyx-quartz-46"):
        assert value in block


def test_the_budget_bounds_the_block_and_the_most_salient_win() -> None:
    """Within the budget, errors and the user's words beat a plain number in tool output."""
    messages = [
        Message.tool("c1", "The archive holds 48213 files from the first import run today."),
        Message.user("Remember that the staging port is 61046 for the new cluster."),
        Message.tool("c2", "The nightly job stopped with a TimeoutError in the export step."),
    ]
    small = check(messages, budget=40)
    assert estimate_tokens(small.block) <= 40
    assert small.kept and small.kept[0].kind in ("error", "fact")
    assert small.dropped >= 1
    assert check(messages, budget=0).block == ""


def test_a_fact_carried_from_an_earlier_summary_keeps_its_original_seq() -> None:
    """Lines of an earlier summary name their originals; nested references are not stacked."""
    earlier = Message.user(
        "<compacted-summary>\n## Retained facts\n"
        "- note: the payment retry limit is 48213 for every tenant [history seq 7]\n"
        "</compacted-summary>"
    )
    block = check([earlier]).block
    assert block.count("[history seq") == 1
    assert block.endswith("[history seq 7]")


def test_a_fact_after_a_listing_in_an_excerpts_work_line_is_kept() -> None:
    """A fact stated after a listing in an excerpt's work line is a clause of its own.

    The excerpt writes each output on one line, its lines apart ("; "). Run together, the
    sizes and the statement read as one clause whose first value (a file size) stood for it,
    and the version was lost at the next excerpt (eval seed 7).
    """
    listing = "21660 shard_ledger.yaml\n53359 module_handler.yaml\n7813 shard_parser.md\n"
    messages = [
        Message.system("You are a coding agent."),
        Message.user("Find why the build fails."),
        Message.assistant("Listing.", [ToolCall(id="c1", name="list_dir", arguments="{}")]),
        Message.tool("c1", listing + "The pinned protobuf version is 3.18.7.\n"),
        Message.assistant("Checking the lock file next."),
    ]
    excerpt = excerpt_summary(messages, (2, 5), max_chars=2_000)
    assert "module_handler.yaml; 7813 shard_parser.md; The pinned protobuf version is 3.18.7." in (
        excerpt
    )
    earlier = Message.user(f"<compacted-summary>\n{excerpt}\n</compacted-summary>")
    kept = check([earlier, Message.assistant("Reading the lock file.")]).kept
    assert "3.18.7" in [atom.value for atom in kept]


def test_a_clause_stands_for_its_stated_value_not_the_name_before_it() -> None:
    """Of two values of one kind, the later (the value after its subject) keys the clause.

    Keyed by the log source named first, two lines of one source held one place between
    them, and the flag was dropped (eval giant_tool_output under terse, seeds 2 and 4-6).
    """
    lines = [
        Message.tool("c1", "726: ops-1 note: the feature flag for the new parser is ff_nimbus_480"),
        Message.tool("c2", "ops-1 reports that the payment retry limit is 48213 for every tenant"),
    ]
    kept = {atom.value for atom in check(lines).kept}
    assert {"ff_nimbus_480", "48213"} <= kept


def test_the_check_is_deterministic() -> None:
    """The same span and summary always give the same block (recovery relies on it)."""
    messages = [
        Message.tool("c1", "note: the payment retry limit is 48213 for every tenant"),
        Message.tool("c2", "The nightly job stopped with a TimeoutError in the export step."),
    ]
    assert check(messages) == check(messages)


def test_a_key_or_code_in_capitals_is_a_stated_value() -> None:
    """A stated value of six or more capitals (a key id, a code) is a fact; a log level is not."""
    stated = Message.tool("c1", "# the vendor API key id is AKVDHHYVWEPX; keep in sync with ops")
    result = check([stated])
    assert [atom.value for atom in result.kept] == ["AKVDHHYVWEPX"]
    assert result.kept[0].kind == "fact"
    # A quarter of its letters are vowels, but no word runs seven consonants together.
    voweled = Message.tool("c1", "INFO  ops-1 note: the vendor API key id is AKVGQJHRUEBP")
    assert [(a.value, a.kind) for a in check([voweled]).kept] == [("AKVGQJHRUEBP", "fact")]
    words = (
        "DEBUG",
        "WARNING",
        "RUNNING",
        "IMPORTANT",
        "STRUCTURE",
        "DESCRIPTION",
        "SYNCHRONIZED",
        "ASYNCHRONOUS",
    )
    for word in words:  # words in capitals, not codes
        level = Message.tool("c2", f"The log level of the nightly run is {word} for every worker.")
        assert check([level]).found == 0, word


def bounded(
    writer: SummaryWriter,
    messages: list[Message],
    seqs: list[int],
    span: tuple[int, int],
    summary: str,
) -> Retention:
    """The block the engine writes with an unbounded policy ceiling: the span's bounds alone."""
    budget = writer.retention_budget(messages, seqs, span, summary, frozenset(), ceiling=10**6)
    return writer.retention(messages, seqs, span, summary, frozenset(), budget_tokens=budget)


def test_the_engine_keeps_the_block_within_a_share_of_the_span() -> None:
    """However large the budget, the block stays within a share of the span.

    At most a third of the span's tokens and half of what the summary freed, so a compaction
    always shrinks what it replaces.
    """
    from steerable_compaction.summaries import RETAINED_SPAN_DIVISOR, SummaryWriter
    from steerable_compaction.tokens import TokenMeter

    def stated(i: int) -> Message:  # no two of one shape: a repeated shape is not retained
        words = " ".join(["replica"] * (i % 12 + 1))
        value = str(7 * 10 ** (3 + i // 12) + i)
        return Message.tool(f"c{i}", f"note: the shard {words} limit is {value} today")

    facts = [stated(i) for i in range(60)]
    writer = SummaryWriter(None, TokenMeter(), timeout=None)
    seqs = list(range(len(facts)))
    span_tokens = sum(estimate_tokens(m) for m in facts)
    summary = "## Current Work\nreading the shards"

    def block(span: tuple[int, int], text: str = summary) -> Retention:
        return bounded(writer, facts, seqs, span, text)

    whole = block((0, len(facts)))
    assert whole.kept and whole.dropped > 0  # the cap, not the budget, stopped it
    assert estimate_tokens(whole.block) <= span_tokens // RETAINED_SPAN_DIVISOR
    # A summary that frees little leaves room for less: at most half of what it freed.
    long_summary = summary + "\n" + "shards were read one by one. " * 150
    freed = span_tokens - estimate_tokens(long_summary) - 16
    assert 0 < freed // 2 < span_tokens // RETAINED_SPAN_DIVISOR
    assert estimate_tokens(block((0, len(facts)), long_summary).block) <= freed // 2


def test_a_block_carried_from_an_earlier_summary_is_not_held_to_the_share() -> None:
    """A compaction whose span is mostly an earlier summary keeps more than a third of it.

    The earlier summary's retained block is condensed already; held to a third of the span, a
    run of compactions with small spans (a large tail) cut it by two thirds each time. Half of
    what the summary freed still bounds it, so the rewrite shrinks.
    """
    from steerable_compaction.compaction.retention import carried_block
    from steerable_compaction.summaries import RETAINED_SPAN_DIVISOR, SummaryWriter
    from steerable_compaction.tokens import TokenMeter

    lines = [
        f"- note: the shard {' '.join(['replica'] * (i % 12 + 1))} limit is "
        f"{7 * 10 ** (3 + i // 12) + i} today {history_ref(10 + i)}"
        for i in range(48)
    ]
    block = RETAINED_HEADING + "\n" + "\n".join(lines)
    earlier = summary_message(f"## Current Work\nreading the shards\n\n{block}", 40)
    assert carried_block(earlier) == block
    assert carried_block(Message.user(block)) == ""  # only a summary carries one
    span = [earlier, Message.tool("c1", "read the next shard list"), Message.user("go on")]
    writer = SummaryWriter(None, TokenMeter(), timeout=None)
    summary = "## Current Work\nreading the shards"
    kept = bounded(writer, span, [0, 60, 61], (0, len(span)), summary)
    span_tokens = sum(estimate_tokens(m) for m in span)
    freed = span_tokens - estimate_tokens(summary) - 16
    assert estimate_tokens(kept.block) > span_tokens // RETAINED_SPAN_DIVISOR
    assert estimate_tokens(kept.block) <= freed // 2
    assert all(atom.seq is not None and atom.seq >= 10 for atom in kept.kept)  # original seqs


def test_handles_addresses_and_dotted_names_are_identifiers() -> None:
    """A handle, an e-mail address or a dotted name (host, module, file) is a stated value.

    "e.g." is no dotted name (each part needs two characters), and a plain word is no value.
    """
    stated = [
        "The service owner handle is @raven.quartz for this release.",
        "Please send the access request to alice.b@example.com before Friday.",
        "The staging database host is db.internal.example for the nightly jobs.",
        "Ownership moved to the team behind @infra/platform last quarter.",
    ]
    result = check([Message.tool(f"c{i}", text) for i, text in enumerate(stated)], budget=2_000)
    values = {atom.value for atom in result.kept}
    assert {"@raven.quartz", "alice.b@example.com", "db.internal.example", "@infra/platform"} <= (
        values
    )
    plain = [
        "The answer for the team is yes, e.g. for the nightly jobs as well.",
        " * @param value the value to parse for the current user session",
        "Use @media queries and @import rules in the main stylesheet for this.",
        "Then install lodash@4.17.21 for the build and compute q@k.T for attention.",
        "The build is green.Now we continue with the rest of the release work.",
    ]
    for i, text in enumerate(plain):
        kept = check([Message.tool(f"c{i}", text)], budget=2_000).kept
        found = [a.value for a in kept]  # a version number stays a number
        assert not [v for v in found if "@" in v or re.fullmatch(r"[A-Za-z.]+", v)], text


def test_a_user_message_of_code_or_a_listing_is_read_as_tool_output() -> None:
    """Observations sent as user messages, or a pasted file, yield no clause of code.

    A user message whose lines are mostly code or numbered listing lines is read as tool output
    (SWE-agent style hosts send every observation so); the user's own words, a short snippet
    among them included, are still the user's.
    """
    corpora = Path(__file__).resolve().parent.parent / "benchmarks" / "corpora"
    source = (corpora / "python_code.txt").read_text(encoding="utf-8")[:12_000]
    listing = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(source.split("\n"), start=1))
    for pasted in (source, listing):
        assert check([Message.tool("c1", pasted)]).found == 0
        assert check([Message.user(pasted)]).found == 0
    said = Message.user(
        "Please keep the retry limit at 5 for the workers.\n"
        "    return limits.get('retry', 5)\n"
        "The staging host is db-7.internal for this test.\n"
        "Ping @ana.lee once it is green."
    )
    values = {atom.value for atom in check([said], budget=2_000).kept}
    assert {"db-7.internal", "@ana.lee"} <= values


def test_a_listing_line_number_is_no_value() -> None:
    """`cat -n` and editor line numbers are cut from a tool line before its atoms are read."""
    listing = "   126\tthe retry limit is 5 for the workers here\n   127\tsee the handler"
    (atom,) = check([Message.tool("c1", listing)], budget=2_000).kept
    assert atom.value == "5" and atom.clause.startswith("the retry limit")


def test_the_block_never_makes_the_rewrite_larger_than_the_span() -> None:
    """A summary nearly as large as the span leaves little room; the block takes half of it.

    The room is what the whole summary message frees (its wrapper included), so the rewrite
    still shrinks the span, however long the summary.
    """
    from steerable_compaction.compaction import summary_message
    from steerable_compaction.summaries import SummaryWriter
    from steerable_compaction.tokens import TokenMeter

    facts = [Message.tool(f"c{k}", f"the port is {61000 + k} now{' ok' * k}") for k in range(12)]
    seqs = list(range(10, 22))
    span_tokens = sum(estimate_tokens(m) for m in facts)
    writer = SummaryWriter(None, TokenMeter(), timeout=None)
    blocks = 0
    for words in range(1, 600):
        summary = "## Current Work\n" + " ".join(["progress"] * words)
        if estimate_tokens(summary_message(summary, 12, history=(10, 21))) >= span_tokens:
            break  # a summary that does not shrink the span is refused before this check
        kept = bounded(writer, facts, seqs, (0, 12), summary)
        blocks += bool(kept.block)
        text = f"{summary}\n\n{kept.block}" if kept.block else summary
        assert estimate_tokens(summary_message(text, 12, history=(10, 21))) < span_tokens, words
    assert blocks > 10


def test_a_short_statement_with_a_hyphenated_word_is_prose() -> None:
    """`on-call` is one word: a three-word clause around it is a statement, not a data row."""
    stated = Message.tool("c1", "# the on-call alias is oncall-cobalt-848; keep in sync with ops")
    assert [atom.value for atom in check([stated]).kept] == ["oncall-cobalt-848"]
    row = Message.tool("c2", "on-call: oncall-cobalt-848")  # a field, not a statement
    assert check([row]).found == 0


def test_minified_code_escaped_json_and_numbered_listings_are_not_statements() -> None:
    """Real tool output yields no clause of code or escaped text.

    The benchmark corpora, read as 3,000-character results: a minified bundle, transcripts saved
    as JSON (files and diffs inside escaped strings); and a `cat -n` listing.
    """
    corpora = Path(__file__).resolve().parent.parent / "benchmarks" / "corpora"

    def results(name: str) -> list[Message]:
        text = (corpora / name).read_text(encoding="utf-8")[:60_000]
        return [Message.tool(f"c{i}", text[i : i + 3000]) for i in range(0, len(text), 3000)]

    assert check(results("minified_js.txt"), budget=5000).found == 0
    for name in ("transcript_en.json", "transcript_ja.json", "transcript_zh.json"):
        kept = check(results(name), budget=5000).kept
        assert not [a.clause for a in kept if "\\n" in a.clause or "def " in a.clause], name
    for number in ("  42\t", "    42\u2192", "42:", "  42  "):  # cat -n, editors, grep -n, nl
        numbered = Message.tool(
            "c3",
            number + "        raise ValueError(f'entry of {size} bytes exceeds the limit 4096')",
        )
        assert check([numbered]).found == 0, number
    # Escaped `\r\n` splits lines too, and leaves no `\r` behind in what is kept.
    crlf = Message.tool("c5", '{"out": "ok\\r\\nthe service port is 8080 on this host\\r\\nend"}')
    assert [a.clause for a in check([crlf]).kept] == ["the service port is 8080 on this host"]
    prose = Message.tool("c4", "The queue drains at most 4096 jobs per run, as configured.")
    assert [atom.value for atom in check([prose]).kept] == ["4096"]
    # Symbols are counted against tool output only: the user's own instruction stays a fact.
    said = 'Set `API_TOKEN` to "tok-5521" and `REGION` to "eu-west-3" (not "us-east-1") first.'
    assert check([Message.user(said)]).found == 1
    assert check([Message.tool("c6", said)]).found == 0


# -- any summarizer, the agent's own findings (issue 25) ------------------------------------------


def test_the_agents_own_findings_are_facts() -> None:
    """A value the agent stated (a conclusion in its own words) is kept like a tool's."""
    messages = [
        Message.assistant("Found it: the leak is in pool_worker_7, which holds 8443 sockets."),
        Message.tool("c1", "ok"),
    ]
    result = check(messages)
    assert any("pool_worker_7" in atom.clause and atom.seq == 100 for atom in result.kept)


def test_a_restated_value_is_kept_once() -> None:
    """A fact stated in a tool result and again by the agent takes one line, not two."""
    messages = [
        Message.tool("c1", "note: the staging database port is 41234 for every tenant"),
        Message.assistant("So the staging database port is 41234; noting it for later."),
    ]
    result = check(messages)
    assert [atom.value for atom in result.kept].count("41234") == 1


def _summarized(body: str) -> Message:
    return Message.user(f"<compacted-summary>\n{body}\n</compacted-summary>")


def test_a_json_summary_is_read_for_the_text_of_its_strings() -> None:
    """A summarizer answering in JSON states facts in string literals: read without quotes.

    Read as they stood, every fact came back in quotes and escapes beside the one it restates
    (issue 25: a JSON summarizer lost a third of the facts the checkpoint one kept).
    """
    body = '{\n  "facts": [\n    "the license server is lic-12.corp.example.net",\n'
    body += '    "the nightly export bucket is s3://amber-exports-123"\n  ]\n}'
    messages = [
        Message.tool("c1", "note: the license server is lic-12.corp.example.net today"),
        _summarized(body),
    ]
    result = check(messages, summary="## Current Work\nreading")
    clauses = [atom.clause for atom in result.kept]
    assert "the nightly export bucket is s3://amber-exports-123" in clauses
    assert not any(c.startswith('"') or c.endswith(",") for c in clauses), clauses
    assert [atom.value for atom in result.kept].count("lic-12.corp.example.net") == 1


def test_prose_separators_are_no_part_of_a_clause() -> None:
    """Clauses of a paragraph joined with '; ' are the clauses, not the separators.

    With the separator kept, a log line restated in a prose summary had a shape of its own and
    escaped the repeated-shape filter.
    """
    rows = [
        f"2025-03-0{i}T10:00:00Z INFO sync-{i} checks cluster {8000 + i} in {i}ms"
        for i in range(1, 5)
    ]
    messages = [
        Message.tool("c1", "\n".join(rows[:2])),
        _summarized("Where the work stands: the tests ran; " + "; ".join(rows[2:]) + "; done."),
    ]
    result = check(messages)
    assert not any("checks cluster" in atom.clause for atom in result.kept), result.kept


def test_a_focus_puts_the_clauses_about_it_first() -> None:
    """A steered compaction's focus doubles the salience of the clauses that name it.

    With room for about two facts, the two about the focus are kept, the others dropped.
    """
    said = [
        "note: the search quota is 4001 per second",
        "the billing export window is 0215-0230 nightly",
        "remember that the search index shard count is 4003",
        "we agreed the billing retry limit is 4004 for every tenant",
        "the search cache was resized to 4005 entries yesterday",
    ]
    messages = [Message.tool(f"c{i}", text) for i, text in enumerate(said)]

    def block(focus: str | None) -> Retention:
        return retention_check(
            messages,
            (0, 5),
            "## Current Work\nreading",
            budget_tokens=55,
            estimate_text=estimate_tokens,
            focus=focus,
        )

    plain, steered = block(None), block("everything about billing")
    assert len(steered.kept) == 2 and all("billing" in a.clause for a in steered.kept)
    assert not all("billing" in a.clause for a in plain.kept)


def test_the_room_limits_what_a_compaction_adds_not_the_block_it_carries() -> None:
    """A large tail leaves little room; the block an earlier summary carried stays whole.

    Issue 25's room budget: the retention block comes out of the room the summary leaves. But
    a block kept since long ago cut at once for a tail that the next compaction summarizes
    anyway lost five facts in one step under the unruly summarizer (heavy, seq 251).
    """
    from steerable_compaction.compaction import summary_message
    from steerable_compaction.compaction.retention import carried_block
    from steerable_compaction.tokens import TokenMeter

    lines = "\n".join(
        f"- note: the shard {i} limit is {7000 + i} [history seq {i}]" for i in range(40)
    )
    earlier = summary_message(f"## Current Work\nreading\n\n{RETAINED_HEADING}\n{lines}", 30)
    span = [earlier, Message.tool("c1", "read the next shard list"), Message.user("go on")]
    writer = SummaryWriter(None, TokenMeter(), timeout=None)
    carried = estimate_tokens(carried_block(earlier))

    def budget(room: int | None) -> int:
        return writer.retention_budget(
            span,
            [0, 60, 61],
            (0, 3),
            "## Current Work\nreading",
            frozenset(),
            ceiling=10**6,
            room=room,
        )

    assert budget(None) <= carried  # the other bounds still hold (half of what it frees)
    assert budget(10) == budget(None) > 10


def _indexed_check(
    messages: list[Message], index: RetentionIndex, seqs: list[int] | None = None
) -> Retention:
    return retention_check(
        messages,
        (0, len(messages)),
        "## Current Work\nreading",
        budget_tokens=400,
        estimate_text=estimate_tokens,
        seqs=seqs if seqs is not None else [100 + i for i in range(len(messages))],
        index=index,
    )


def test_the_index_reads_each_message_once_across_checks(monkeypatch: Any) -> None:
    """A message already read at its seq is not read again by a later check, same block."""
    import steerable_compaction.compaction.atoms as module

    reads: list[str] = []
    real = module.message_clauses

    def counted(message: Message, speaker: str) -> Any:
        reads.append(message.text)
        return real(message, speaker)

    monkeypatch.setattr(module, "message_clauses", counted)
    messages = [
        Message.user("The staging database port is 41234 and the user is @ana."),
        Message.assistant("I found that the build id is 99871, not 99870 as the docs say."),
    ]
    index = RetentionIndex()
    first = _indexed_check(messages, index)
    assert len(reads) == 2 and len(index) == 2
    again = _indexed_check(
        [*messages, Message.user("Now deploy build 99871 to host db.internal.")], index
    )
    assert len(reads) == 3  # only the new message was read
    assert again.found >= first.found
    assert _indexed_check(messages, index) == first == check(messages)


def test_the_index_reads_again_a_different_message_at_a_seq() -> None:
    """A seq whose message is another object (a reopened record) is read again, not trusted."""
    index = RetentionIndex()
    old = [Message.user("The staging database port is 41234, said the operator today.")]
    new = [Message.user("The production database port is 5433, said the operator today.")]
    assert "41234" in _indexed_check(old, index).block
    assert "5433" in _indexed_check(new, index).block


def test_the_index_holds_its_capacity_newest_first() -> None:
    """Past its capacity the index forgets the oldest message it read."""
    index = RetentionIndex(capacity=2)
    messages = [
        Message.user(f"The port of service {i} is {40000 + i} on the staging host.")
        for i in range(3)
    ]
    _indexed_check(messages, index, seqs=[5, 6, 7])
    assert len(index) == 2


def test_a_giant_message_is_read_at_its_ends_only() -> None:
    """The work per message is bounded: past `MESSAGE_CHARS` only its first and last halves."""
    filler = "\n".join(f"row {i} of the table, nothing to see" for i in range(MESSAGE_CHARS // 20))
    head = "The deploy key id is AKVDHHYVWEPX, stated by the operator at the start."
    middle = "The staging database port is 41234, stated by the operator in the middle."
    tail = "The build number is 99871, stated by the operator at the very end."
    text = f"{head}\n{filler}\n{middle}\n{filler}\n{tail}"
    block = check([Message.user(text)], budget=2000).block
    assert "AKVDHHYVWEPX" in block and "99871" in block
    assert "41234" not in block


_CORPORA = Path(__file__).resolve().parent.parent / "benchmarks" / "corpora"
_SAMPLE_LINES = [
    "    indented = 1",
    "\tx",
    "def f(x):",
    "definitely prose.",
    "return",
    "@dataclass(frozen=True)",
    "  @property  ",
    "@ana said hi",
    "a dict {",
    "call(  \u2003",
    "ends with a colon:\u00a0",
    "  ",
    "",
    "é: ü",
    "x = 1  # done;",
    "@a.b(c) d",
]


@given(st.text(alphabet=st.sampled_from(list(" \t\u3000:;{}(,@._-defclasimportx1é")), max_size=24))
def test_the_fast_code_line_test_agrees_with_the_code_pattern(line: str) -> None:
    """`_code_line` is `_CODE.search` exactly: the same lines read as code, the same facts."""
    import steerable_compaction.compaction.atoms as module

    assert module._code_line(line) == bool(module._CODE.search(line))


def test_the_fast_code_line_and_shape_agree_on_every_corpus_line() -> None:
    """On real text (the benchmark corpora), `_code_line` and `_shape` match their regexes."""
    import steerable_compaction.compaction.atoms as module

    names = re.compile("a+")
    table = str.maketrans(
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_", "#" * 10 + "a" * 53
    )
    lines = list(_SAMPLE_LINES)
    for path in sorted(_CORPORA.glob("*.*")):
        lines += path.read_text(encoding="utf-8").split("\n")
    for line in lines:
        assert module._code_line(line) == bool(module._CODE.search(line)), line
        if line.isascii():
            assert module._shape(line) == names.sub("a", line.translate(table)), line


@given(st.lists(st.text(alphabet=st.sampled_from(list("ab_Z09 ,\n.é中文١")), max_size=12)))
def test_the_shapes_of_a_message_made_at_once_equal_each_shape_made_alone(
    clauses: list[str],
) -> None:
    """`_shapes` joins a message's clauses for one substitution; each shape is as `_shape` makes it.

    A clause holding a newline (a JSON line unquoted) falls back to one shape at a time.
    """
    import steerable_compaction.compaction.atoms as module

    assert module._shapes(clauses) == [module._shape(clause) for clause in clauses]


def test_the_closing_note_of_an_earlier_summary_is_no_fact() -> None:
    """The closing note of a summary ("This summary replaces 109 ...") is not a value.

    Read as a clause, its count stood for a fact and took a place in the block (eval,
    long_haul at twice the length: one of 75 places, every compaction).
    """
    earlier = summary_message(
        "## Current Work\n- The staging database port is 39157.",
        109,
        3,
        history=(3013, 3089),
    )
    assert "replaces 109 earlier messages" in earlier.text
    kept = check([earlier, Message.assistant("Reading the lock file.")]).kept
    assert [atom.value for atom in kept] == ["39157"]


def test_carried_facts_of_one_shape_are_kept_and_a_table_is_not() -> None:
    """Facts an earlier summary carries were judged when kept; a table's rows never are facts.

    Three carried facts in one template ("note: the X worker port is N") read as a repeated
    shape and were all dropped from the next block (eval, long_haul at twice its length).
    """
    carried = "\n".join(
        f"- note: the {name} worker port is {port} {history_ref(10 + i)}"
        for i, (name, port) in enumerate((("cluster", 60454), ("staging", 39157), ("edge", 41120)))
    )
    earlier = summary_message(f"## Current Work\nreading\n\n{RETAINED_HEADING}\n{carried}", 40)
    table = "\n".join(f"node-{i} port is {50000 + i}" for i in range(6))
    kept = {atom.value for atom in check([earlier, Message.tool("c1", table)]).kept}
    assert kept == {"60454", "39157", "41120"}
