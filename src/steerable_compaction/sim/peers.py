"""Peer-style arms, reimplemented from the public behaviour of other agent frameworks.

Each class documents the public source it follows (read, never copied; prompts are
paraphrased). Their triggers are normalized to the engine's token threshold (see `arms`), so
the arms differ in what they keep, what they send the summarizer and whether that request can
hit the prompt cache. The extractive summarizer stands in for every LLM alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..compaction import repair_tool_pairs
from ..errors import ContextOverflowError
from ..hooks import CompactionOutcome, ToolResultContext
from ..messages import Message, TextPart, ToolResult
from ..providers.base import CompletionRequest
from ..record import CompactionTrigger
from .arms import ArmHooks, leading_system
from .summarizer import (
    CODEX_HEAD,
    LANGCHAIN_HEAD,
    OPENHANDS_HEAD,
    TRANSCRIPT_CLOSE,
    TRANSCRIPT_OPEN,
    flatten,
)

__all__ = ["CodexArm", "LangChainArm", "OpenHandsArm", "head_tail"]


def head_tail(text: str, keep: int, marker: str) -> str:
    """`text` cut to its first and last `keep // 2` characters around `marker`."""
    if len(text) <= keep:
        return text
    half = keep // 2
    return text[:half] + marker + text[len(text) - half :]


def _with_text(result: ToolResult, text: str) -> ToolResult:
    images = tuple(p for p in result.content if not isinstance(p, TextPart))
    return ToolResult(
        call_id=result.call_id, content=(TextPart(text=text), *images), is_error=result.is_error
    )


OPENHANDS_PROMPT = (
    "You keep a running state summary for an interactive agent. You get the events that are "
    "about to be forgotten and the previous summary. Track USER_CONTEXT (requirements, goals, "
    "clarifications), COMPLETED, PENDING, CURRENT_STATE and, for code, CODE_STATE, TESTS, "
    "CHANGES, DEPS and VERSION_CONTROL_STATUS. Keep task ids exact; keep every section short."
)


class OpenHandsArm(ArmHooks):
    """`openhands`: half-cut cold summary with keep-first (OpenHands condenser style).

    Public source: OpenHands `LLMSummarizingCondenser`
    (`openhands/memory/condenser/impl/llm_summarizing_condenser.py`, 2025): keep the first
    `keep_first` events (here: the system prompt and the task message, as the v0 default
    `keep_first=1` over events), keep the newest `max_size // 2 - keep_first - 1` events and
    summarize the ones in between, together with the previous summary, in a separate prompt:
    one user message with `<PREVIOUS SUMMARY>` and one `<EVENT id=…>` block per forgotten event,
    each cut to `max_event_length` (10,000) characters; the condenser LLM has prompt caching
    turned off. The summary goes right after the kept head. Observations longer than
    `max_message_chars` (30,000) are cut to their head and tail. The condenser fires on an
    event count (`max_size`); here it fires at the token threshold and halves the messages.
    """

    max_event_chars = 10_000
    max_message_chars = 30_000

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Cut observations over `max_message_chars` to their head and tail."""
        text = ctx.result.text
        if len(text) <= self.max_message_chars:
            return ctx.result
        cut = head_tail(
            text, self.max_message_chars, "\n[... Observation truncated due to length ...]\n"
        )
        return _with_text(ctx.result, cut)

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Summarize everything between the kept head and the newest half (cold)."""
        messages = list(self.record.projection.messages)
        n = len(messages)
        lead = leading_system(messages)  # OpenHands keeps the system prompt and the first message
        keep_first = lead + 1 if lead < n and messages[lead].role == "user" else lead
        previous = ""
        forgotten_start = keep_first
        if keep_first < n and messages[keep_first].text.startswith(OPENHANDS_HEAD):
            previous = messages[keep_first].text[len(OPENHANDS_HEAD) :].strip()
            forgotten_start += 1
        tail_start = n - max(n // 2 - keep_first - 1, 1)
        while tail_start > forgotten_start and messages[tail_start].role == "tool":
            tail_start -= 1  # never keep a result whose call is forgotten
        if tail_start <= forgotten_start:
            return None
        marker = "\n[... truncated ...]\n"
        events = "".join(
            f"<EVENT id={self.record.projection.seqs[i]}>\n"
            f"{head_tail(flatten([messages[i]]), self.max_event_chars, marker)}\n</EVENT>\n"
            for i in range(forgotten_start, tail_start)
        )
        prompt = (
            f"{OPENHANDS_PROMPT}\n\n{TRANSCRIPT_OPEN}\n<PREVIOUS SUMMARY>\n"
            f"{head_tail(previous, self.max_event_chars, marker)}\n</PREVIOUS SUMMARY>\n\n"
            f"{events}{TRANSCRIPT_CLOSE}\nNow summarize the events using the rules above."
        )
        request = CompletionRequest(
            messages=(Message.user(prompt),),
            max_output_tokens=self.summary_max_tokens,
            cache_retention="none",
        )
        return await self.write_summary(
            (keep_first, tail_start),
            request,
            lambda summary: [Message.user(f"{OPENHANDS_HEAD}\n{summary}")],
            trigger,
            pressure,
        )


LANGCHAIN_PROMPT = (
    "Extract the most important context from the conversation history below. What you write "
    "will replace that history, so keep what matters for the overall goal and avoid repeating "
    "work already done. Reply with the extracted context only.\n\n<messages>\nMessages to "
    "summarize:\n{messages}\n</messages>"
)
_TOO_LONG = "Previous conversation was too long to summarize."


def approx_tokens(message: Message) -> int:
    """LangChain's `count_tokens_approximately`: about 4 characters a token, 3 per message."""
    chars = len(message.text) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return math.ceil(chars / 4) + 3


def trim_last(messages: Sequence[Message], max_tokens: int) -> list[Message]:
    """`trim_messages(strategy="last", allow_partial=True, start_on="human")`, approximately.

    Keeps the newest messages within `max_tokens`, the oldest of them cut to its last lines when
    it does not fit whole, then drops leading messages until one from the user comes first.
    """
    kept: list[Message] = []
    left = max_tokens
    for message in reversed(messages):
        cost = approx_tokens(message)
        if cost <= left:
            kept.append(message)
            left -= cost
            continue
        lines = message.text.split("\n")
        tail: list[str] = []
        while lines and math.ceil(len("\n".join([lines[-1], *tail])) / 4) + 3 <= left:
            tail.insert(0, lines.pop())
        if tail and message.role == "user":
            kept.append(Message.user("\n".join(tail)))
        break
    kept.reverse()
    while kept and kept[0].role != "user":
        kept.pop(0)
    return kept


class LangChainArm(ArmHooks):
    """`langchain`: keep the last 20 messages, cold summary of a trimmed input.

    Public source: LangChain v1 `SummarizationMiddleware`
    (`libs/langchain_v1/langchain/agents/middleware/summarization.py`, 2025): when the token
    count passes `max_tokens_before_summary`, keep `messages_to_keep=20` messages (moving the cut
    so no AI/tool pair is split), trim the older ones to their last 4,000 approximate tokens
    starting on a human message (`trim_messages(strategy="last", start_on="human",
    allow_partial=True)`; nothing left gives "Previous conversation was too long to
    summarize."), ask the model once with the summary prompt (a cold request) and replace the
    older messages with one human message "Here is a summary of the conversation to date:".
    The system prompt lives outside the message state and stays.
    """

    messages_to_keep = 20
    trim_tokens = 4_000

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Summarize all but the newest 20 messages from a trimmed input."""
        messages = list(self.record.projection.messages)
        start = leading_system(messages)
        conversation = messages[start:]
        cutoff = len(conversation) - self.messages_to_keep
        while cutoff > 0 and conversation[cutoff].role == "tool":
            cutoff -= 1
        if cutoff <= 0:
            return None
        trimmed = trim_last(conversation[:cutoff], self.trim_tokens)
        text = LANGCHAIN_PROMPT.format(
            messages=f"{TRANSCRIPT_OPEN}\n{flatten(trimmed)}\n{TRANSCRIPT_CLOSE}"
        )
        request = CompletionRequest(
            messages=(Message.user(text),), max_output_tokens=self.summary_max_tokens
        )
        return await self.write_summary(
            (start, start + cutoff),
            request,
            lambda summary: [Message.user(f"{LANGCHAIN_HEAD}\n\n{summary}")],
            trigger,
            pressure,
            summary=None if trimmed else _TOO_LONG,
        )


CODEX_PROMPT = (
    "Context checkpoint: write a handoff summary for the model that will continue this task "
    "after the conversation is replaced. Include the progress so far and the key decisions, "
    "constraints and user preferences, what remains to be done, and the exact data and "
    "references needed to go on. Be concise and structured."
)
CODEX_BRIDGE = (
    "Another model worked on this task before and left the summary below; build on it instead "
    "of starting over."
)


class CodexArm(ArmHooks):
    """`codex`: full summary + recent user messages, with a warm replay (Codex CLI style).

    Public source: OpenAI Codex CLI `codex-rs/core/src/compact.rs` (2025): auto-compaction sends
    the whole history followed by the summarization prompt as a user message (the history is
    the cached prefix); a context-window error during compaction drops the oldest history item
    and retries. The new history is the initial context, the most recent user messages (text
    only, newest first, up to `COMPACT_USER_MESSAGE_MAX_TOKENS` = 20,000 approximate tokens; here
    at most an eighth of the window so the result fits small windows), then the summary behind a
    bridge prefix. Tool output is cut to its head and tail when recorded (`truncate.rs`, about
    10,000 bytes). The trigger (`auto_compact_token_limit`) is normalized to the threshold.
    """

    max_output_bytes = 10_000
    user_message_tokens = 20_000

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Cut tool output over `max_output_bytes` to its head and tail."""
        text = ctx.result.text
        if len(text.encode("utf-8")) <= self.max_output_bytes:
            return ctx.result
        data = text.encode("utf-8")
        half = self.max_output_bytes // 2
        head = data[:half].decode("utf-8", "ignore")
        tail = data[len(data) - half :].decode("utf-8", "ignore")
        omitted = (len(data) - 2 * half) // 4
        return _with_text(ctx.result, f"{head}\n…{omitted} tokens truncated…\n{tail}")

    def _user_messages(self, messages: Sequence[Message]) -> list[Message]:
        budget = min(self.user_message_tokens, self.policy.max_context_tokens // 8)
        texts = [
            m.text
            for m in messages
            if m.role == "user" and m.text and not m.text.startswith(CODEX_HEAD)
        ]
        chosen: list[str] = []
        for text in reversed(texts):
            cost = math.ceil(len(text.encode("utf-8")) / 4)
            if cost <= budget:
                chosen.append(text)
                budget -= cost
                continue
            if budget > 0:
                chosen.append(head_tail(text, budget * 4, "\n…tokens truncated…\n"))
            break
        return [Message.user(text) for text in reversed(chosen)]

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Summarize the whole history with a warm replay; keep recent user messages."""
        messages = list(self.record.projection.messages)
        start = leading_system(messages)
        if len(messages) - start < 2:
            return None
        history = repair_tool_pairs(messages)  # exactly what the last request carried
        instruction = Message.user(CODEX_PROMPT)
        while True:
            request = CompletionRequest(
                messages=(*history, instruction),
                tools=self.tool_specs,
                max_output_tokens=self.summary_max_tokens,
            )
            try:
                summary = await self.ask(request)
                break
            except ContextOverflowError:
                if len(history) - start <= 1:
                    raise
                dropped = history.pop(start)  # the oldest item, and the results of its calls
                ids = {c.id for c in dropped.tool_calls}
                history = [
                    m for m in history if (r := m.tool_result) is None or r.call_id not in ids
                ]
                history = repair_tool_pairs(history)
        users = self._user_messages(messages)
        return await self.write_summary(
            (start, len(messages)),
            request,
            lambda text: [*users, Message.user(f"{CODEX_HEAD}\n{CODEX_BRIDGE}\n\n{text}")],
            trigger,
            pressure,
            summary=summary,
            called=True,
        )
