from __future__ import annotations

import math

import pytest

from steerable_compaction.host.protocol import (
    INVALID_PARAMS,
    Params,
    RpcError,
    encode_line,
    scrub,
    valid_id,
)

from .host_helpers import strict_json


def test_scrub_replaces_what_strict_json_cannot_carry_at_any_depth() -> None:
    """Lone surrogates (keys too) become U+FFFD, NaN and infinities null; the rest is kept."""
    value = {"a\ud800": [math.nan, (math.inf, -math.inf), {"k": "x\udfffy"}], "ok": [1, 2.5, None]}
    assert scrub(value) == {
        "a\ufffd": [None, [None, None], {"k": "x\ufffdy"}],
        "ok": [1, 2.5, None],
    }


def test_encode_line_always_writes_one_strict_json_line() -> None:
    """An outgoing message holding NaN or a lone surrogate is still one strict UTF-8 JSON line."""
    line = encode_line({"id": 1, "result": {"x": math.nan, "t": "\ud800"}})
    assert strict_json(line) == {"id": 1, "result": {"x": None, "t": "\ufffd"}}
    assert encode_line({"t": "é"}) == '{"t":"é"}\n'.encode()  # readable UTF-8, not escapes


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (None, True),
        (0, True),
        (10**300, True),
        (1.5, True),
        ("x", True),
        (True, False),
        (math.nan, False),
        (math.inf, False),
        ("\ud800", False),
        ([1], False),
        ({}, False),
    ],
)
def test_valid_id_accepts_what_a_reply_can_echo_exactly(value: object, valid: bool) -> None:
    """Null, integers, finite numbers and valid text are ids; booleans and the rest are not."""
    assert valid_id(value) is valid


def test_params_text_is_a_string_or_absent() -> None:
    """`text` returns the string (or `None` when absent or null) and names a wrong type."""
    assert Params({"session": "a"}, ("session",)).text("session") == "a"
    assert Params({"session": None}, ("session",)).text("session") is None
    assert Params(None, ("session",)).text("session") is None
    with pytest.raises(RpcError) as caught:
        Params({"session": 3}, ("session",)).text("session")
    assert caught.value.code == INVALID_PARAMS and caught.value.data == {"param": "session"}
    assert "session must be a string, got 3" in caught.value.message
