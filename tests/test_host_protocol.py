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
    """`text` returns the string (or `None` when absent) and names a wrong type, `null` too.

    Issue 26: `"session": null` is refused, not read as the default session.
    """
    assert Params({"session": "a"}, ("session",)).text("session") == "a"
    assert Params(None, ("session",)).text("session") is None
    for value in (3, None):
        with pytest.raises(RpcError) as caught:
            Params({"session": value}, ("session",)).text("session")
        assert caught.value.code == INVALID_PARAMS and caught.value.data == {"param": "session"}
        assert f"session must be a string (omit it for the default), got {value}" in (
            caught.value.message
        )


def test_params_refuse_a_lone_surrogate_anywhere_naming_its_field() -> None:
    """Issue 26: values and keys at any depth; the walk needs no recursion (any nesting)."""
    cases = [
        ({"input": "a\ud800"}, "input", "U+D800) at character 1"),
        (
            {"seed": [{"content": [{"text": "ok"}, {"text": "\udfff"}]}]},
            "seed[0].content[1].text",
            "",
        ),
        ({"seed": [{"role": "user", "\udc01": 1}]}, "seed[0].\ufffd", "U+DC01"),
    ]
    for params, field, detail in cases:
        with pytest.raises(RpcError) as caught:
            Params(params, ("input", "seed"))
        assert caught.value.code == INVALID_PARAMS
        assert caught.value.data == {"param": field.split("[")[0].split(".")[0], "field": field}
        assert caught.value.message.startswith(f"{field} holds a lone surrogate") and detail in (
            caught.value.message
        )
    deep: object = "\ud800"
    for _ in range(20_000):
        deep = [deep]
    with pytest.raises(RpcError, match="lone surrogate"):
        Params({"seed": deep}, ("seed",))
    assert Params({"seed": [{"text": "fine é 😀"}]}, ("seed",)).raw
