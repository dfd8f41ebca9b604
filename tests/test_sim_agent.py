"""`sim.agent`: the scripted agent that plays a task."""

from __future__ import annotations

import json

import pytest

from steerable_compaction import Message, TextPart
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.sim import build_task
from steerable_compaction.sim.agent import ScriptedAgent, command_text, observation_message
from steerable_compaction.sim.content import screenshot
from steerable_compaction.sim.tasks import Step, Turn


async def test_agent_fails_loudly_off_script() -> None:
    """A request before `begin`, or a tool the agent did not call, is a bug in the harness."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    with pytest.raises(RuntimeError, match="begin"):
        agent.respond(CompletionRequest(messages=(Message.user("hi"),)))
    with pytest.raises(RuntimeError, match="pending"):
        await agent.run_tool("read_file", {})


def _step(tool: str, output: str, parallel: tuple[Step, ...] = ()) -> Step:
    return Step(
        tool=tool,
        arguments=json.dumps({"path": f"src/{tool}.py"}),
        thought=f"Using {tool}.",
        output=output,
        parallel=parallel,
    )


async def test_agent_types_commands_and_hands_each_output_back_once() -> None:
    """In an observations turn a step is plain text with the command; no call is pending."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    steps = (_step("read_file", "one"), _step("grep", "two"))
    agent.begin(Turn(user=Message.user("go"), steps=steps, reply="done", observations=True))
    request = CompletionRequest(messages=(Message.user("go"),))
    assert agent.observation() is None
    first = agent.respond(request)
    assert not first.tool_calls
    assert first.text == "Using read_file.\n\n```\nread_file src/read_file.py\n```"
    assert agent.observation() == Message.user("OBSERVATION:\none")
    assert agent.observation() is None  # handed back once
    with pytest.raises(RuntimeError, match="pending"):
        await agent.run_tool("read_file", {})
    assert agent.respond(request).text.endswith("grep src/grep.py\n```")
    assert agent.observation() == Message.user("OBSERVATION:\ntwo")
    assert agent.respond(request) == Message.assistant("done")
    assert (agent.steps, agent.calls) == (2, 0)


async def test_agent_makes_parallel_calls_in_one_message_and_runs_them_in_order() -> None:
    """A step with `parallel` calls is one assistant message; outputs come back in call order."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    step = _step("read_file", "a", (_step("grep", "b"), _step("list_dir", "c")))
    agent.begin(Turn(user=Message.user("go"), steps=(step,), reply="done"))
    reply = agent.respond(CompletionRequest(messages=(Message.user("go"),)))
    assert [(c.id, c.name) for c in reply.tool_calls] == [
        ("call_1", "read_file"),
        ("call_2", "grep"),
        ("call_3", "list_dir"),
    ]
    assert reply.text == "Using read_file."
    with pytest.raises(RuntimeError, match="pending"):
        await agent.run_tool("grep", {})  # out of order
    assert [await agent.run_tool(n, {}) for n in ("read_file", "grep", "list_dir")] == list("abc")
    assert (agent.steps, agent.calls) == (1, 3) and agent.observation() is None


def test_an_observation_of_a_picture_keeps_the_picture() -> None:
    """An output with an image comes back as a user message holding the same image."""
    picture = screenshot(80, 60, "a chart")
    step = Step(tool="screenshot", arguments="", thought="Look.", output=(picture,))
    assert observation_message(step).parts == (TextPart(text="OBSERVATION:"), picture)
    assert command_text(step) == "Look.\n\n```\nscreenshot\n```"


def _question_turn(agent: ScriptedAgent) -> Turn:
    task = agent.task
    turn = task.turns[-1]
    assert turn.questions
    agent.begin(turn)
    return turn


def test_the_agent_searches_its_history_for_facts_it_cannot_see() -> None:
    """In the question turn, unseen anchors are searched for once; answers come from results.

    In-context answers are kept apart (`recall`) from the final ones (`recall_with_tools`).
    """
    from steerable_compaction import ToolSpec
    from steerable_compaction.recall import HISTORY_SEARCH

    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    turn = _question_turn(agent)
    needle = turn.questions[0]
    offered = (ToolSpec(name=HISTORY_SEARCH, description="", parameters={}),)
    first = agent.respond(
        CompletionRequest(messages=(Message.system("s"), turn.user), tools=offered)
    )
    queries = [json.loads(c.arguments)["query"] for c in first.tool_calls]
    assert [c.name for c in first.tool_calls] == [HISTORY_SEARCH] * len(turn.questions)
    assert queries[0] == f'"{needle.anchor}"'
    found = Message.tool(
        "recall_1", f"[seq 9] tool result of read_file\n  the {needle.anchor} is {needle.value}"
    )
    final = agent.respond(
        CompletionRequest(messages=(Message.system("s"), turn.user, first, found), tools=offered)
    )
    assert not final.tool_calls and needle.value in final.text
    assert agent.recall()[needle.id] is False
    assert agent.recall_with_tools()[needle.id] is True
    assert agent.recall_requests == 1


def test_without_the_history_tools_the_agent_answers_at_once() -> None:
    """No `history_search` offered: the first answers are the final ones."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    turn = _question_turn(agent)
    reply = agent.respond(CompletionRequest(messages=(Message.system("s"), turn.user)))
    assert not reply.tool_calls and "I do not know." in reply.text
    assert agent.recall() == agent.recall_with_tools()
    assert agent.recall_requests == 0


def test_facts_not_found_by_search_are_looked_for_in_the_listed_images() -> None:
    """Search results that list hidden images send the agent to read them, newest first.

    It reads `IMAGE_READS` a request, notes what it found, asks for the list again when a
    compaction took it away, and answers from what the images showed.
    """
    from steerable_compaction import ToolSpec
    from steerable_compaction.recall import HISTORY_READ, HISTORY_SEARCH
    from steerable_compaction.sim.agent import IMAGE_READS

    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    turn = _question_turn(agent)
    needle, *others = turn.questions
    offered = tuple(
        ToolSpec(name=name, description="", parameters={})
        for name in (HISTORY_SEARCH, HISTORY_READ)
    )
    head = (Message.system("s"), turn.user)
    first = agent.respond(CompletionRequest(messages=head, tools=offered))
    seqs = list(range(100, 100 - 2 * IMAGE_READS - 1, -1))
    listing = Message.tool(
        "recall_1",
        "No hidden message holds every term of the query.\nText search cannot see into images. "
        "Hidden messages with images, newest first: tool result of shot(2), v1: seq "
        f"{', '.join(map(str, seqs[:-1]))}; user: seq {seqs[-1]}. history_read one to look again.",
    )
    found = [
        Message.tool(f"recall_{i}", f"the {n.anchor} is {n.value}") for i, n in enumerate(others, 2)
    ]
    second = agent.respond(
        CompletionRequest(messages=(*head, first, listing, *found), tools=offered)
    )
    read = [json.loads(c.arguments)["seq"] for c in second.tool_calls]
    assert [c.name for c in second.tool_calls] == [HISTORY_READ] * IMAGE_READS
    assert read == seqs[:IMAGE_READS]
    assert all(f"the {n.anchor} is {n.value}" in second.text for n in others)  # noted
    # A compaction took the listing away: the agent asks for it again, then reads on.
    third = agent.respond(
        CompletionRequest(messages=(*head, Message.user("[summary]")), tools=offered)
    )
    assert [c.name for c in third.tool_calls] == [HISTORY_SEARCH]
    fourth = agent.respond(CompletionRequest(messages=(*head, third, listing), tools=offered))
    assert [json.loads(c.arguments)["seq"] for c in fourth.tool_calls] == seqs[
        IMAGE_READS : 2 * IMAGE_READS
    ]
    fifth = agent.respond(CompletionRequest(messages=(*head, fourth, listing), tools=offered))
    assert [json.loads(c.arguments)["seq"] for c in fifth.tool_calls] == seqs[-1:]
    shot = screenshot(64, 64, f"Banner: the {needle.anchor} is {needle.value}.")
    seen = Message.tool("look_1", (TextPart(text=f"[seq {seqs[-1]}] user"), shot))
    final = agent.respond(CompletionRequest(messages=(*head, fifth, seen), tools=offered))
    assert not final.tool_calls
    assert all(agent.recall_with_tools()[n.id] for n in turn.questions)
    assert needle.value in final.text
    assert agent.recall()[needle.id] is False


def test_what_the_agent_saw_before_searching_survives_a_compaction_the_results_cause() -> None:
    """Answers seen in context before searching are kept in the final answer."""
    from steerable_compaction import ToolSpec
    from steerable_compaction.recall import HISTORY_SEARCH

    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    turn = _question_turn(agent)
    seen, *unseen = turn.questions
    offered = (ToolSpec(name=HISTORY_SEARCH, description="", parameters={}),)
    context = Message.user(f"the {seen.anchor} is {seen.value}")
    first = agent.respond(
        CompletionRequest(messages=(Message.system("s"), context, turn.user), tools=offered)
    )
    assert len(first.tool_calls) == len(unseen)
    # The results pushed the session over its threshold: a summary replaced the context line.
    results = [
        Message.tool(f"recall_{i}", f"the {n.anchor} is {n.value}") for i, n in enumerate(unseen, 1)
    ]
    final = agent.respond(
        CompletionRequest(
            messages=(Message.system("s"), Message.user("[summary]"), turn.user, *results),
            tools=offered,
        )
    )
    assert final.text.splitlines()[0] == f"1. {seen.value}"
    assert all(agent.recall_with_tools()[n.id] for n in turn.questions)
