"""Projection checkpoints: what the model sees at a seq, so an open reads only what follows it.

After a boundary that replaced a span (the projection just shrank), a store that keeps
checkpoints writes one: the projection as it stands after entries `[0, seq)` (its messages and
the seq each came from), with what the record counts of those entries (`message_count`, the
assistant messages among them as `replies`, the meter's anchors). Opening the record then folds
only the entries from `seq` on into it; the older ones load on first use (`Record.entries`
before `seq`, `history()`, `compactions()`, an iteration) and are checked against the
checkpoint then. Checkpoints are derived data, never part of the record: a missing, damaged or
mismatched one costs a full read, never an entry.

One checkpoint per record, replaced by each newer one, as one checksummed JSON line (the CRC
scheme of the entries): `{"checkpoint": 2, "seq", "last": [crc, size], "offset",
"message_count", "replies", "newest_usage", "newest_boundary", "seqs", "messages", "crc"}`
(layout 1 had no `replies`: a record whose checkpoint is of layout 1 is read whole, until its
next boundary writes a new one). `last` binds it to the record: the CRC-32 and size of entry
`seq - 1`'s stored bytes (without a newline), which the store compares with what its medium
holds before trusting the rest; `offset` is where entry `seq` starts in a JSONL file (0
elsewhere). No checkpoint is written while a bracket is open (its start would have to travel
with it).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MessageError, RecordError
from ..messages import Message, message_from_dict, message_to_dict
from .projection import Projection

__all__ = ["CHECKPOINT_VERSION", "Checkpoint", "decode_checkpoint", "encode_checkpoint"]

CHECKPOINT_VERSION = 2
"""The checkpoint layout this build writes and reads (any other is ignored: a full read)."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_CRC_KEY = b',"crc":'


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """The projection after entries `[0, seq)`, bound to entry `seq - 1` by its CRC and size."""

    seq: int
    last_crc: int
    last_size: int
    offset: int
    message_count: int
    replies: int
    newest_usage: int
    newest_boundary: int
    seqs: tuple[int, ...]
    messages: tuple[Message, ...]

    def projection(self) -> Projection:
        """A fresh projection holding the checkpoint's messages (no bracket open)."""
        out = Projection()
        out.extend(self.seqs, self.messages)
        return out


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """`checkpoint` as one checksummed JSON line (newline-terminated)."""
    obj = {
        "checkpoint": CHECKPOINT_VERSION,
        "seq": checkpoint.seq,
        "last": [checkpoint.last_crc, checkpoint.last_size],
        "offset": checkpoint.offset,
        "message_count": checkpoint.message_count,
        "replies": checkpoint.replies,
        "newest_usage": checkpoint.newest_usage,
        "newest_boundary": checkpoint.newest_boundary,
        "seqs": list(checkpoint.seqs),
        "messages": [message_to_dict(m) for m in checkpoint.messages],
    }
    head = _dumps(obj).encode("utf-8")[:-1]
    return b'%s,"crc":%d}\n' % (head, zlib.crc32(head))


def _int(obj: dict[str, Any], key: str, low: int, high: int) -> int:
    value = obj.get(key)
    if type(value) is not int or not low <= value <= high:
        raise RecordError(f"checkpoint field {key!r} should be an integer in [{low}, {high}]")
    return value


def decode_checkpoint(data: bytes) -> Checkpoint:
    """The checkpoint `data` holds, its checksum and fields verified; `RecordError` if not one.

    A checkpoint of another layout raises too: the caller reads the record in full instead.
    """
    line = data[:-1] if data.endswith(b"\n") else b""
    at = line.rfind(_CRC_KEY)
    digits = line[at + len(_CRC_KEY) : -1] if at >= 0 else b""
    if not (digits.isdigit() and len(digits) <= 10 and line.endswith(b"}")):
        raise RecordError("not a checkpoint: no checksum at its end")
    if zlib.crc32(line[:at]) != int(digits):
        raise RecordError("checkpoint checksum mismatch: it changed after it was written")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        raise RecordError("not a checkpoint: not valid JSON") from None
    if type(obj) is not dict or obj.get("checkpoint") != CHECKPOINT_VERSION:
        found = obj.get("checkpoint") if type(obj) is dict else None
        raise RecordError(f"checkpoint layout {found!r}, this build reads {CHECKPOINT_VERSION}")
    seq = _int(obj, "seq", 1, 2**62)
    last = obj.get("last")
    if type(last) is not list or len(last) != 2:
        raise RecordError("checkpoint field 'last' should be [crc, size]")
    seqs, raw = obj.get("seqs"), obj.get("messages")
    if type(seqs) is not list or type(raw) is not list or len(seqs) != len(raw):
        raise RecordError("checkpoint fields 'seqs' and 'messages' should be lists of one length")
    if not all(type(s) is int and 0 <= s < seq for s in seqs):
        raise RecordError(f"checkpoint 'seqs' should be seqs before {seq}")
    try:
        messages = tuple(message_from_dict(m, index=i) for i, m in enumerate(raw))
    except MessageError as exc:
        raise RecordError(f"checkpoint message: {exc}") from None
    return Checkpoint(
        seq=seq,
        last_crc=_int({"crc": last[0]}, "crc", 0, 2**32 - 1),
        last_size=_int({"size": last[1]}, "size", 1, 2**62),
        offset=_int(obj, "offset", 0, 2**62),
        message_count=_int(obj, "message_count", 0, seq),
        replies=_int(obj, "replies", 0, seq),
        newest_usage=_int(obj, "newest_usage", -1, seq - 1),
        newest_boundary=_int(obj, "newest_boundary", -1, seq - 1),
        seqs=tuple(seqs),
        messages=messages,
    )


def bound_to(checkpoint: Checkpoint, body: bytes | None) -> bool:
    """Whether `body` (entry `seq - 1` as the medium holds it, no newline) is the one it names."""
    return (
        body is not None
        and len(body) == checkpoint.last_size
        and zlib.crc32(body) == checkpoint.last_crc
    )


def same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Whether two projections' messages are equal, one by one."""
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))
