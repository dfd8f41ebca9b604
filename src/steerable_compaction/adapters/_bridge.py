"""`Bridge`: a framework's own message history in, the compacted projection out, losslessly.

A framework keeps its history (LangChain's state, the Agents SDK's run items, pydantic-ai's
messages) and hands it over before each model call. The bridge appends what is new to the
`Compactor`'s record, lets the engine compact, and converts the projection back. Messages that
compaction did not touch go back as the very framework objects they came from (metadata, ids
and all); messages it wrote (summaries, folds) are converted once and then reused, so every
request, including the summary request, repeats the exact objects of the request before it:
the warm prefix holds on the framework's side too.
"""

from __future__ import annotations

import base64
import binascii
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..compactor import AnySummarizer, Compactor
from ..errors import ConversionError, MessageError
from ..messages import ImagePart, Message
from ..policy import CompactionPolicy

__all__ = ["Bridge", "Group", "image_from_url", "image_url", "turn_model_compactor"]

F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class Group(Generic[F]):
    """Framework items and the messages they convert to (one of either side may be several)."""

    items: tuple[F, ...]
    messages: tuple[Message, ...]


class Bridge(Generic[F]):
    """Records a framework's history into `compactor` and returns the projection in its terms.

    `split` converts new framework items into `Group`s; `convert` turns one message that
    compaction wrote into framework items; `prompt_tokens` reads, from the new items, what the
    previous request cost (the reply's usage), if the framework reports it. One bridge serves
    one conversation.
    """

    def __init__(
        self,
        compactor: Compactor,
        *,
        split: Callable[[Sequence[F]], list[Group[F]]],
        convert: Callable[[Message], list[F]],
        prompt_tokens: Callable[[Sequence[F]], int | None] = lambda new: None,
    ) -> None:
        self.compactor = compactor
        self._split = split
        self._convert = convert
        self._prompt_tokens = prompt_tokens
        self._prefix: list[F] = []  # what the next history must start with
        self._starts: dict[int, Group[F]] = {}  # id(first message of a group) -> group
        self._fresh: dict[int, tuple[Message, list[F]]] = {}  # id(message) -> its conversion
        self._usage: int | None = None  # the prompt tokens a `catch_up` read, for the next step

    def new_items(self, items: Sequence[F]) -> Sequence[F]:
        """The items after the known prefix; `MessageError` if `items` does not continue it."""
        known = len(self._prefix)
        if len(items) < known or (
            known
            and items[known - 1] is not self._prefix[-1]
            and items[known - 1] != self._prefix[-1]
        ):
            raise MessageError(
                f"the history ({len(items)} items) does not continue the {known} already "
                "recorded: one adapter instance serves one conversation, and its history may "
                "only grow",
                index=known - 1 if known else None,
            )
        return items[known:]

    def record(self, items: Sequence[F]) -> list[Message]:
        """Convert `items`, remember where each message came from; return the messages."""
        messages: list[Message] = []
        for group in self._split(items):
            if group.messages:
                self._starts[id(group.messages[0])] = group
            messages.extend(group.messages)
        return messages

    def expect(self, prefix: Sequence[F]) -> None:
        """The next history handed over starts with `prefix`."""
        self._prefix = list(prefix)

    def catch_up(self, items: Sequence[F]) -> None:
        """Record what is new in `items` without a request: the end of a run, its final reply.

        The reply's usage, if any, waits for the next request, whose pressure it anchors.
        """
        new = self.new_items(items)
        self.compactor.append(self.record(new))
        usage = self._prompt_tokens(new)
        if usage is not None:
            self._usage = usage
        self.expect(items)

    async def request(self, items: Sequence[F]) -> list[F]:
        """Append what is new in `items`, compact if needed; the request in framework terms."""
        new = self.new_items(items)
        projection = await self.compactor.extend_async(self.record(new), self._usage_of(new))
        self.expect(items)
        return self.to_framework(projection)

    def request_sync(self, items: Sequence[F]) -> list[F]:
        """`request` for synchronous frameworks (not callable from a running event loop)."""
        new = self.new_items(items)
        projection = self.compactor.extend(self.record(new), self._usage_of(new))
        self.expect(items)
        return self.to_framework(projection)

    def _usage_of(self, new: Sequence[F]) -> int | None:
        """The previous request's prompt tokens: from `new`, else what `catch_up` read."""
        usage, pending = self._prompt_tokens(new), self._usage
        self._usage = None
        return pending if usage is None else usage

    def to_framework(self, messages: Sequence[Message]) -> list[F]:
        """`messages` as framework items: original objects where untouched, else converted once."""
        out: list[F] = []
        i = 0
        while i < len(messages):
            group = self._starts.get(id(messages[i]))
            size = len(group.messages) if group is not None else 0
            if (
                group is not None
                and i + size <= len(messages)
                and all(a is b for a, b in zip(messages[i : i + size], group.messages, strict=True))
            ):
                out.extend(group.items)
                i += size
                continue
            out.extend(self._converted(messages[i]))
            i += 1
        return out

    def _converted(self, message: Message) -> list[F]:
        cached = self._fresh.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        items = self._convert(message)
        self._fresh[id(message)] = (message, items)  # the message is kept alive with its id
        return items


def turn_model_compactor(
    policy: CompactionPolicy,
    summarizer: AnySummarizer | None,
    turn_model: AnySummarizer,
    *,
    summarize: bool | None = None,
    **options: Any,
) -> Compactor:
    """The adapters' `Compactor`: `summarizer` writes the summaries, else the turn model.

    Every adapter's `summarizer=` means this: `None` asks the agent's own model, through the
    framework, for a warm-prefix replay; a function (sync or async, given a `SummaryRequest`)
    is asked instead. Images replay as the turn model saw them (R28). `summarize` is the
    deprecated switch of the first LangChain and pydantic-ai adapters: `False` turns the LLM
    summarizer off, as the policy's `summarizer_enabled=False` does. `options` are
    `Compactor`'s own (`record`, `model`, `summarizer_timeout`, `env`).
    """
    if summarize is not None:
        warnings.warn(
            "summarize= is deprecated: pass summarizer= to have another function write the "
            "summaries, or a policy with summarizer_enabled=False for the excerpt summary",
            DeprecationWarning,
            stacklevel=3,
        )
        if not summarize:
            policy = policy.replace(summarizer_enabled=False)
    chosen = turn_model if summarizer is None else summarizer
    return Compactor(policy, summarizer=chosen, replay_images=True, **options)


def image_from_url(url: str, where: str) -> ImagePart:
    """An `ImagePart` from a `data:` URL (decoded to bytes) or a remote URL (kept as is)."""
    if not url.startswith("data:"):
        return ImagePart(url=url)
    header, _, payload = url.partition(",")
    media_type = header[len("data:") :].split(";")[0] or None
    if ";base64" not in header:
        raise ConversionError("a data URL image must be base64-encoded", field=where)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        reason = f"the image's base64 data does not decode ({exc})"
        raise ConversionError(reason, field=where) from exc
    return ImagePart(data=data, media_type=media_type)


def image_url(part: ImagePart) -> str:
    """The URL form of `part`: its URL, or a base64 `data:` URL of its bytes."""
    if part.url is not None:
        return part.url
    data = base64.b64encode(part.data or b"").decode("ascii")
    return f"data:{part.media_type or 'application/octet-stream'};base64,{data}"
