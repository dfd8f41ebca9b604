"""The demo's terminal view: a live pressure bar, and one line per compaction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["PressureView"]


class PressureView:
    """The terminal view: a live pressure bar, and one line per compaction.

    A compaction's line waits for the next request, so it can show what that request really
    measured next to the boundary's recorded (estimated) post tokens.
    """

    def __init__(self, out: TextIO, *, window: int, threshold: int, live: bool) -> None:
        self.out = out
        self.window = window
        self.threshold = threshold
        self.live = live
        self.round = 0
        self.pressure = 0
        self._bar_shown = False
        self._pending: list[tuple[Mapping[str, Any], int]] = []
        self._recall: set[object] = set()  # ids of the history_search calls shown

    def bar(self, width: int = 40) -> str:
        """`round  12 [#####....|..] 3,210 / 8,192  39%` with `|` at the threshold."""
        filled = min(width, round(width * self.pressure / self.window))
        mark = min(width - 1, round(width * self.threshold / self.window))
        cells = ["#" if i < filled else "." for i in range(width)]
        cells[mark] = "|" if mark >= filled else "!"
        share = self.pressure / self.window
        return (
            f"round {self.round:>4} [{''.join(cells)}] {self.pressure:>7,} / {self.window:,}"
            f"  {share:4.0%}"
        )

    def _clear(self) -> None:
        if self.live and self._bar_shown:
            self.out.write("\r" + " " * 78 + "\r")
            self._bar_shown = False

    def line(self, text: str) -> None:
        """Print a line above the bar."""
        self._clear()
        self.out.write(text + "\n")
        self._show()

    def _show(self) -> None:
        if self.live and self.round:
            self.out.write("\r" + self.bar())
            self.out.flush()
            self._bar_shown = True

    def _flush_pending(self, measured: int | None) -> None:
        pending, self._pending = self._pending, []
        for event, before in pending:
            self.line(_compaction_line(event, before, measured))

    def on_event(self, event: Mapping[str, Any]) -> None:
        """Take one session event (see `host.events.entry_event`)."""
        kind = event["type"]
        if kind == "tool_calls":
            for call in event.get("calls", ()):
                if call.get("name") == "history_search":
                    self._flush_pending(None)
                    self._recall.add(call.get("id"))
                    self.line(f"  history_search {call.get('arguments', '')}")
        if kind == "tool_result" and event.get("call_id") in self._recall:
            lines = _result_text(event["message"]).splitlines()
            for line in lines[:1] + [x for x in lines[1:] if x.strip()][:2]:  # the best hit
                self.line(f"    {_clip(line.strip(), 110)}")
        if kind in ("tool_calls", "reply"):
            usage = event.get("usage") or {}
            self.round += 1
            self.pressure = int(usage.get("prompt_tokens", self.pressure))
            self._flush_pending(self.pressure if usage else None)
            if self.live:
                self._clear()
                self._show()
            elif self.round % 10 == 0:
                self.out.write(self.bar() + "\n")
        elif kind == "user":
            self._flush_pending(None)
            self.line(f"\nturn: {_short(event['message'], 90)}")
        elif kind == "compaction":
            self._pending.append((event, self.round + 1))
        elif kind == "reminder":
            self.line(f"  reminder ({event['reason']}) appended for the model and the host")

    def finish(self) -> None:
        """Print what is still pending and end the live bar with a newline."""
        self._flush_pending(None)
        if self.live and self._bar_shown:
            self.out.write("\n")
            self._bar_shown = False


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _result_text(message: Mapping[str, Any]) -> str:
    """The text of a tool message in the record's JSON form."""
    return "".join(
        str(c.get("text", ""))
        for p in message.get("parts", ())
        if p.get("type") == "tool_result"
        for c in p.get("content", ())
        if c.get("type") == "text"
    )


def _short(message: Mapping[str, Any], width: int) -> str:
    text = " ".join(
        str(p.get("text", "")) for p in message.get("parts", ()) if p.get("type") == "text"
    )
    return text if len(text) <= width else text[: width - 1] + "…"


def _compaction_line(event: Mapping[str, Any], before_round: int, measured: int | None) -> str:
    pre, post = int(event["pre_tokens"]), int(event["post_tokens"])
    text = (
        f"  compaction before round {before_round}: {event['action']} ({event['trigger']}) "
        f"{pre:,} -> {post:,} tokens"
    )
    if measured is not None:
        text += f" (next request: {measured:,})"
    summarizer = event.get("summarizer")
    if summarizer:
        prompt = int(summarizer["prompt_tokens"])
        cached = int(summarizer["cached_tokens"])
        text += f"; summarizer cache read {cached / max(prompt, 1):.0%} of {prompt:,}"
    elif event["action"] in ("compact", "micro_compact"):
        text += f"; {event.get('edits', 0)} messages folded or offloaded, no LLM call"
    return text
