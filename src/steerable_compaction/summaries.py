"""Getting a summary the engine can write: the summarizer's, checked, or the excerpt fallback.

`SummaryWriter.attempt` asks the summarizer (with a timeout) and refuses what cannot stand in
for the span: an error, an empty or degenerate text, a summary that does not shrink the span.
Then, where the plan allows, the deterministic excerpt takes its place. A merge of the summary
chain whose summarizer answer is refused or fails is not written (an excerpt of summaries keeps
less than they do: the chain stays as it is); one that cannot ask the summarizer at all (off,
its breaker open, or no request that fits) is merged as an excerpt. `retention` is the
retention check the engine runs on whatever summary it writes; it reads the span as it was
appended (`as_appended`), so a fold or an image offload that came before the summary hides
nothing from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from .compaction import SummaryNeeded, excerpt_summary, summary_message
from .compaction.judge import content_shortfall, distinctive_values, judge_summary
from .compaction.retention import Retention, RetentionIndex, carried_block, retention_check
from .compaction.summary import SummaryRequest, with_retry
from .hooks import Summarizer
from .messages import Message
from .record import Entry, MessageAppended, SummarySource
from .tokens import TokenMeter, estimate_tokens

__all__ = ["SummaryAttempt", "SummaryWriter", "as_appended", "closing_message", "span_history"]

logger = logging.getLogger("steerable_compaction.engine")

SUMMARY_ATTEMPTS = 2
"""How many times a summarizer is asked for one compaction: an answer refused by content is
asked once more, its reason named in the instruction (`with_retry`; the replay is the same,
so the prompt cache serves it again). Errors and timeouts are not asked again here."""

RETAINED_SPAN_DIVISOR = 3
"""The retained block holds at most 1/3 of the span's tokens (besides `retention_token_ratio`).

A block carried by an earlier summary in the span counts whole: it may come back as it was.

`steerable-compaction eval` over seeds 0-3: 1/8 of the span kept in-context recall at 0.83 with
a 0.16 ratio, 1/5 at 0.85, 1/3 at 0.96 with a 0.3 ratio (see docs/memory.md).
"""


def as_appended(
    messages: Sequence[Message],
    seqs: Sequence[int],
    span: tuple[int, int],
    entries: Sequence[Entry],
) -> list[Message]:
    """`messages` with each one of `messages[span]` as the record holds it, before any rewrite.

    A fold or an image offload replaces a message in place and keeps its seq, so the entry at
    that seq holds the original; a summary or a kept message (placed by a boundary) stays as
    it is. `entries` are the record's, indexed by seq.
    """
    out = list(messages)
    for i in range(*span):
        event = entries[seqs[i]].event
        if isinstance(event, MessageAppended) and event.message is not out[i]:
            out[i] = event.message
    return out


def span_history(seqs: Sequence[int], span: tuple[int, int]) -> tuple[int, int] | None:
    """The first and last record seq of `span` (what a summary of it names), if any."""
    begin, end = span
    return (min(seqs[begin:end]), max(seqs[begin:end])) if end > begin else None


def closing_message(
    text: str,
    messages: Sequence[Message],
    seqs: Sequence[int],
    span: tuple[int, int],
    kept: Collection[int],
) -> Message:
    """The summary message that replaces `messages[span]` after its `kept` messages."""
    return summary_message(
        text,
        span[1] - span[0],
        len(kept),
        kept_users_only=all(messages[i].role == "user" for i in kept),
        history=span_history(seqs, span),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryAttempt:
    """The summary to write and who wrote it, or `text=None` when none can be written.

    `failure` says why the summarizer's own text is not used (`None` when it is).
    """

    text: str | None
    source: SummarySource
    failure: str | None = None


class SummaryWriter:
    """Summaries for the engine from `summarizer` (or `None`: the excerpt only).

    `meter` prices a candidate against the span it replaces, in the session's units.
    """

    def __init__(
        self, summarizer: Summarizer | None, meter: TokenMeter, *, timeout: float | None
    ) -> None:
        self.summarizer = summarizer
        self.meter = meter
        self.timeout = timeout
        self.index = RetentionIndex()  # each message read once by the retention checks

    async def attempt(
        self,
        plan: SummaryNeeded,
        messages: Sequence[Message],
        *,
        use_summarizer: bool = True,
        max_tokens: int | None = None,
        seqs: Sequence[int] | None = None,
    ) -> SummaryAttempt:
        """The summary text and who wrote it, or `text=None` and why not.

        `use_summarizer=False` (the policy switched it off) goes straight to the excerpt, as
        does a plan whose summary request cannot fit the window (`plan.fits`). `max_tokens` is
        the most the summary message may cost and still leave the next request inside the
        window: a summary over it frees too little, and the excerpt, sized to fit, stands in.
        A refused summary gives way to the excerpt, whose retention block keeps the facts a
        fold would cut (a summary is only asked for where the fold does not come first); an
        answer refused only for keeping too few values stays in front of that excerpt when it
        costs at most half the room (`failure` still names the refusal, and the breaker counts
        it). `seqs` (the projection's record seqs) price the summary with the history reference
        it is written with.
        """
        failure: str | None = None
        thin: str | None = None  # a genuine answer refused only for keeping too few values
        room = plan.middle_tokens - plan.kept_tokens  # what the summary message must undercut
        if max_tokens is not None:
            room = min(room, max_tokens + 1)
        kept = len(plan.kept)

        # Priced as written (`closing_message`): with the record seqs it names, when known.
        history = span_history(seqs, plan.request.span) if seqs is not None else None

        def price(text: str) -> int:
            message = summary_message(
                text, plan.replaced, kept, kept_users_only=plan.kept_users_only, history=history
            )
            return self.meter.estimate(message)

        if self.summarizer is not None and use_summarizer and not plan.fits:
            failure = "no summary request of the span fits the window"
            logger.warning("%s; writing the excerpt summary instead", failure)
        elif self.summarizer is not None and use_summarizer:
            request = plan.request
            for asked in range(SUMMARY_ATTEMPTS):
                try:
                    text = await asyncio.wait_for(self.summarizer(request), self.timeout)
                except Exception as exc:  # a failed summarizer must never lose the session
                    failure = f"summarizer failed: {type(exc).__name__}: {exc}"
                    break  # an error is the provider's (its retry hooks); a timeout, twice
                accepted, failure, sparse = self._judge(text, plan, request, messages, price, room)
                thin = sparse or thin
                if accepted is not None:
                    if asked:
                        logger.info("summarizer's second answer accepted")
                    return SummaryAttempt(text=accepted, source="summarizer")
                if asked + 1 < SUMMARY_ATTEMPTS:
                    logger.info("%s; asking once more", failure)
                    retry = with_retry(plan.request.instruction.text, failure or "")
                    request = replace(
                        plan.request, messages=(*plan.request.replay, Message.user(retry))
                    )
            if plan.merge:
                # The chain stays as it is: an excerpt of summaries keeps less than they do.
                logger.warning("%s; the summary chain is left unmerged", failure)
                return SummaryAttempt(text=None, source="excerpt", failure=failure)
            logger.warning("%s; falling back to the excerpt summary", failure)
        span = plan.request.span
        middle_chars = sum(len(m.text) for m in plan.request.replay[span[0] :])
        budget = max(400, min(12_000, middle_chars // 4))
        if thin is not None and price(thin) * 2 > room:
            thin = None  # the excerpt needs most of the room; the answer adds least per token
        for lead in (thin, None) if thin is not None else (None,):
            chars = budget
            while True:
                text = excerpt_summary(messages, span, max_chars=chars, after=lead)
                if price(text) < room or chars <= 400:
                    break
                chars = max(400, chars // 2)
            if price(text) < room:
                return SummaryAttempt(text=text, source="excerpt", failure=failure)
        why = "the excerpt summary would not shrink the span"
        return SummaryAttempt(
            text=None, source="excerpt", failure=f"{failure}; {why}" if failure else why
        )

    @staticmethod
    def _judge(
        text: object,
        plan: SummaryNeeded,
        request: SummaryRequest,
        messages: Sequence[Message],
        price: Callable[[str], int],
        room: int,
    ) -> tuple[str | None, str | None, str | None]:
        """The summary to write from the answer `text`, or `None` and why it is refused.

        By content (`compaction.judge`): any layout and language pass; garbage, an answer
        that does not shrink the span, and one keeping clearly fewer of the span's values than
        the excerpt of its size are refused. The third item is such a sparse answer (cleaned):
        no garbage, only short of exact values, so the excerpt that stands in keeps it in front
        (it may hold what no excerpt can: what images showed, the model's own reading).
        """
        if not isinstance(text, str):
            return None, f"summarizer returned {type(text).__name__}, not text", None
        if not text.strip():
            return None, "summarizer returned an empty summary", None
        # The echo check reads the instruction as first asked: a retry's note quotes the answer.
        instruction = plan.request.instruction.text
        verdict = judge_summary(text, instruction=instruction)
        if verdict.text is None:
            return None, f"summarizer's answer was refused: {verdict.reason}", None
        if price(verdict.text) >= room:
            return None, "summarizer's summary does not shrink the span enough", None
        span = plan.request.span
        short = content_shortfall(
            verdict.text,
            distinctive_values(messages, span, known=instruction),
            lambda chars: excerpt_summary(messages, span, max_chars=chars),
        )
        if short is not None:
            return None, f"summarizer's answer was refused: {short}", verdict.text
        if verdict.note:
            logger.info("summarizer's answer accepted: %s", verdict.note)
        return verdict.text, None, None

    def retention_budget(
        self,
        messages: Sequence[Message],
        seqs: Sequence[int],
        span: tuple[int, int],
        summary: str,
        kept: frozenset[int],
        *,
        ceiling: int,
        room: int | None = None,
        calibration: float = 1.0,
    ) -> int:
        """The most the retention block of this summary may hold, in static-estimate tokens.

        `ceiling` (the policy's `retention_tokens`) and `room` (what the summary left before
        the compaction's target level) are in the session's billed units; `calibration` (billed
        per estimated token) converts them, so every budget is priced in the same units. Never
        more than half of what the summary message (wrapper included) leaves free, so the
        rewrite still shrinks, nor more than a share of the span, so a small span does not come
        back as a list; a block an earlier summary of the span carries is condensed already and
        may come back whole: only the rest of the span is held to the share and to the room.
        """
        if ceiling <= 0:
            return 0
        begin, end = span
        span_tokens = carried = 0
        for i in range(begin, end):
            if i not in kept:
                span_tokens += estimate_tokens(messages[i])
                carried += estimate_tokens(carried_block(messages[i]))
        wrapped = closing_message(summary.rstrip() + "\n\n", messages, seqs, span, kept)
        free = span_tokens - estimate_tokens(wrapped)
        share = (span_tokens - carried) // RETAINED_SPAN_DIVISOR + carried
        static = max(calibration, 1e-6)
        budget = min(int(ceiling / static), share, free // 2)
        if room is not None:
            # A block an earlier summary carried stays whole within the other bounds: the
            # room only limits what this compaction adds (a large tail must not push out
            # facts kept since long ago; the next compaction summarizes the tail anyway).
            budget = min(budget, max(int(room / static), carried))
        return max(budget, 0)

    def retention(
        self,
        messages: Sequence[Message],
        seqs: Sequence[int],
        span: tuple[int, int],
        summary: str,
        kept: frozenset[int],
        *,
        budget_tokens: int,
        entries: Sequence[Entry] | None = None,
        focus: str | None = None,
    ) -> Retention:
        """The retention check for a summary of `messages[span]`, within `budget_tokens`.

        `budget_tokens` is in static-estimate tokens (`retention_budget`). With the record's
        `entries`, the facts are read from the span's messages as appended (`as_appended`).
        Priced with the static estimator, not the usage-calibrated meter, so the block depends
        only on the record (recovery rebuilds the same text). `focus` is the compaction's.
        """
        if budget_tokens <= 0:  # the check is off: nothing to price or read
            return Retention(found=0, kept=(), block="")
        return retention_check(
            messages if entries is None else as_appended(messages, seqs, span, entries),
            span,
            summary,
            budget_tokens=budget_tokens,
            estimate_text=estimate_tokens,
            seqs=seqs,
            skip=kept,
            focus=focus,
            index=self.index,
        )
