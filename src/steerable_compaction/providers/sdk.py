"""`SdkProvider`: the skeleton the OpenAI and Anthropic adapters share.

Both adapters build (or take) an official SDK client, send one request built from a
`CompletionRequest`, read the reply as the plain JSON the server sent, map SDK errors through
the one error table, and fold a stream into the same `Completion`. The SDK-specific parts are
the abstract methods; everything else lives here once.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ..errors import ConfigError, ProviderError
from .base import Completion, CompletionRequest, StreamDone, StreamEvent, TextDelta, malformed_reply

__all__ = ["SdkProvider", "StreamState", "missing_key", "missing_sdk", "resolve_key"]

ClientT = TypeVar("ClientT")
ErrorT = TypeVar("ErrorT", bound=Exception)


class StreamState(Protocol):
    """What the stream's events have said so far."""

    def add(self, event: Mapping[str, Any], provider: str) -> list[str]:
        """Fold in one event; return its text pieces."""

    def completion(self, provider: str) -> Completion:
        """The reply the events spelled out."""


class _Closable(Protocol):
    async def close(self) -> None: ...


def missing_sdk(exc: ModuleNotFoundError, package: str, cls: str) -> ModuleNotFoundError:
    """The error for `cls` imported without its SDK: it names the extra that installs it."""
    why = "is not installed" if exc.name == package else f"cannot be imported ({exc})"
    return ModuleNotFoundError(
        f"{cls} needs the {package!r} package, which {why}: "
        f"pip install 'steerable-compaction[{package}]'",
        name=exc.name,
    )


def missing_key(env_var: str, vendor: str, cls: str, hint: str = "") -> ConfigError:
    """The `ConfigError` for a provider built without an API key, in plain words."""
    message = (
        f"no {vendor} API key: set the {env_var} environment variable "
        f"(export {env_var}=...) or pass {cls}(api_key=...){hint}"
    )
    return ConfigError(env_var, None, f"an {vendor} API key", message=message)


def resolve_key(api_key: str | None, env_vars: Sequence[str]) -> str | None:
    """`api_key`, else the first of `env_vars` set (non-empty) in the environment."""
    if api_key:
        return api_key
    return next((os.environ[v] for v in env_vars if os.environ.get(v)), None)


class SdkProvider(ABC, Generic[ClientT, ErrorT]):
    """A `Provider` on an official SDK client (see the module docstring).

    Subclasses set `_sdk_error` (the SDK's error root) and `_sdk_model` (its reply model
    class), and implement `_params`, `_create`, `_error`, `_completion` and `_stream_state`.
    """

    _sdk_error: type[ErrorT]
    _sdk_model: type[Any]

    def __init__(self, model: str, *, client: ClientT, owns_client: bool, name: str) -> None:
        self.model = model
        self._client = client
        self._owns_client = owns_client
        self._name = name

    @staticmethod
    def check_client(client: object, base_url: str | None, api_key: str | None) -> None:
        """A ready client excludes `base_url` and `api_key` (no silent choice between them)."""
        if client is not None and (base_url is not None or api_key is not None):
            raise ConfigError("client", client, "no base_url or api_key alongside a client")

    @property
    def name(self) -> str:
        """The name used in errors (the vendor's unless given)."""
        return self._name

    async def aclose(self) -> None:
        """Close the SDK client if this provider built it (a passed `client` stays open)."""
        if self._owns_client:
            client: _Closable = self._client  # type: ignore[assignment]
            await client.close()

    async def complete(self, request: CompletionRequest) -> Completion:
        """Send `request` and return the whole reply; errors as the subclass documents."""
        try:
            reply = await self._create(self._params(request, stream=False))
        except json.JSONDecodeError as exc:
            raise malformed_reply(self.name, f"the body is not JSON ({exc})") from exc
        except self._sdk_error as exc:
            raise self._error(exc) from exc
        return self._completion(self._as_dict(reply))

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` as a stream; yield `TextDelta`s, then one `StreamDone`."""
        state = self._stream_state()
        try:
            events = await self._create(self._params(request, stream=True))
            try:
                async for event in events:
                    for piece in state.add(self._as_dict(event), self.name):
                        yield TextDelta(piece)
            finally:
                await events.close()
        except json.JSONDecodeError as exc:
            raise malformed_reply(self.name, f"a stream event is not JSON ({exc})") from exc
        except self._sdk_error as exc:
            raise self._error(exc) from exc
        yield StreamDone(state.completion(self.name))

    def _as_dict(self, value: object) -> Mapping[str, Any]:
        """The reply as the server sent it (the SDKs build their models without validating)."""
        if isinstance(value, self._sdk_model):
            value = value.to_dict(warnings=False)
        if not isinstance(value, Mapping):
            raise malformed_reply(self.name, f"expected a JSON object, got {type(value).__name__}")
        return value

    @abstractmethod
    def _params(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        """The SDK call's keyword arguments."""

    @abstractmethod
    async def _create(self, params: dict[str, Any]) -> Any:
        """Make the SDK call (a reply, or an async stream of events with `close()`)."""

    @abstractmethod
    def _error(self, exc: ErrorT) -> ProviderError:
        """The classified error for an SDK failure."""

    @abstractmethod
    def _completion(self, data: Mapping[str, Any]) -> Completion:
        """The `Completion` for a whole reply."""

    @abstractmethod
    def _stream_state(self) -> StreamState:
        """A fresh fold for one stream's events."""
