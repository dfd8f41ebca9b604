# ruff: noqa: RUF001  (CJK text uses full-width punctuation on purpose)
"""Deterministic synthetic content for simulated sessions: code, logs, configs, CJK text, images.

Everything is drawn from a `random.Random` the caller seeds, so a task built twice from the same
seed is byte-identical. The generators aim at the texture of real agent sessions, including
what makes summarizing hard: most tool output is noise that *looks* specific (ids, ports, hashes,
counts), so a fact worth keeping does not stand out by its shape.

Images are real PNG files (a blank canvas of the stated size) that carry their visible content
as a `tEXt` chunk; `image_text` is the simulated vision that reads it back.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from random import Random

from ..messages import ImagePart

__all__ = [
    "cjk_log",
    "config_dump",
    "fact",
    "grep_hits",
    "image_text",
    "japanese_notes",
    "listing",
    "log_lines",
    "png_image",
    "python_source",
    "screenshot",
    "sentence",
    "tests_output",
]

_WORDS = (
    "cache handler request retry session worker queue batch token parser module config "
    "client server index record buffer stream socket thread timeout backoff schema field "
    "payload router service adapter metric tracer bucket shard replica lease cursor window "
    "budget limit offset commit branch release deploy rollout canary migration fixture "
    "snapshot journal ledger invoice account tenant region cluster node pod volume"
).split()
_VERBS = (
    "reads writes flushes parses validates retries caches loads drops merges splits checks "
    "resolves schedules emits forwards rejects normalizes"
).split()
_MODULES = ("api", "core", "db", "auth", "billing", "search", "jobs", "web", "sync", "io")
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR")
_HAN = (
    "缓存 处理器 请求 重试 会话 进程 队列 批次 令牌 解析器 模块 配置 客户端 服务器 索引 记录 "
    "缓冲区 数据流 超时 退避 字段 路由 服务 指标 存储桶 分片 副本 租约 游标 窗口 预算 偏移 提交 "
    "分支 发布 部署 迁移 快照 日志 账户 租户 区域 集群 节点"
).split()
_HAN_VERBS = "读取 写入 刷新 解析 校验 重试 加载 丢弃 合并 拆分 检查 调度 转发 拒绝".split()
_KANA = (
    "キャッシュ ハンドラ リクエスト セッション ワーカー キュー バッチ トークン パーサ モジュール "
    "設定 クライアント サーバ インデックス レコード バッファ タイムアウト スキーマ ルータ サービス"
).split()


def sentence(rng: Random, words: int) -> str:
    """A plausible developer sentence of about `words` words."""
    out = [rng.choice(_WORDS) if i % 3 else rng.choice(_VERBS) for i in range(max(words, 2))]
    return out[0].capitalize() + " " + " ".join(out[1:]) + "."


_KINDS = ("limit", "timeout", "owner", "ticket", "port", "version", "bucket", "quota")


def _fact_value(rng: Random, kind: str) -> str:
    if kind == "ticket":
        return f"OPS-{rng.randint(1000, 9999)}"
    if kind == "port":
        return str(rng.randint(1024, 65535))
    if kind == "version":
        return f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
    if kind == "owner":
        return f"@{rng.choice(_WORDS)}-team"
    if kind == "bucket":
        return f"s3://{rng.choice(_WORDS)}-{rng.randint(10, 99)}"
    if kind == "timeout":
        return f"{rng.randint(1, 120)}s"
    return str(rng.randint(2, 5000))


def fact(rng: Random) -> str:
    """A sentence stating a specific value, as comments, notes and docs are full of.

    Needles look like this too, so a fact worth keeping does not stand out by its shape.
    """
    kind = rng.choice(_KINDS)
    subject = f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {kind}"
    value = _fact_value(rng, kind)
    return rng.choice(
        (
            f"note: the {subject} is {value}",
            f"the {subject} is {value} (see OPS-{rng.randint(1000, 9999)})",
            f"{subject.capitalize()} changed to {value} last week.",
            f"Remember that the {subject} is {value} in production.",
        )
    )


def _ident(rng: Random) -> str:
    return f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"


def python_source(rng: Random, path: str, lines: int) -> str:
    """A Python module of about `lines` lines: imports, functions, comments, constants."""
    out = [f"# {path}", f'"""{sentence(rng, 8)}"""', "", "from __future__ import annotations", ""]
    out += [f"import {rng.choice(_MODULES)}" for _ in range(rng.randint(1, 4))]
    out.append("")
    while len(out) < lines:
        kind = rng.random()
        if kind < 0.15:
            out.append(f"{_ident(rng).upper()} = {rng.randint(2, 99_999)}")
        elif kind < 0.21:
            out.append(f"# {sentence(rng, rng.randint(5, 12))}")
        elif kind < 0.25:
            out.append(f"# {fact(rng)}")
        else:
            name, arg = _ident(rng), rng.choice(_WORDS)
            out.append(f"def {name}({arg}, *, limit={rng.randint(1, 512)}):")
            out.append(f'    """{sentence(rng, rng.randint(4, 10))}"""')
            for _ in range(rng.randint(2, 6)):
                out.append(f"    {rng.choice(_WORDS)} = {arg}.{_ident(rng)}({rng.randint(0, 64)})")
            out.append(f"    return {rng.choice(_WORDS)}")
            out.append("")
    return "\n".join(out[:lines])


def config_dump(rng: Random, lines: int) -> str:
    """`KEY=VALUE` settings: ports, hosts, sizes, ids (specific-looking noise)."""
    out = []
    for _ in range(lines):
        if rng.random() < 0.06:
            out.append(f"# {fact(rng)}")
            continue
        key = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{rng.choice(_WORDS)}".upper()
        kind = rng.random()
        if kind < 0.3:
            value = str(rng.randint(1024, 65535))
        elif kind < 0.5:
            value = f"{rng.choice(_WORDS)}-{rng.randint(1, 40)}.internal.example"
        elif kind < 0.7:
            value = f"{rng.getrandbits(32):08x}"
        elif kind < 0.85:
            value = rng.choice(("true", "false", "auto", "off"))
        else:
            value = f"{rng.randint(1, 900)}ms"
        out.append(f"{key}={value}")
    return "\n".join(out)


def _stamp(rng: Random, base: int) -> str:
    seconds = base + rng.randint(0, 86_000)
    return f"2025-03-{1 + seconds // 86_400 % 28:02d}T{seconds // 3600 % 24:02d}:" + (
        f"{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"
    )


def log_lines(rng: Random, lines: int) -> str:
    """Timestamped service log lines with ids, durations and the odd warning or error."""
    out = []
    base = rng.randint(0, 10**6)
    for _ in range(lines):
        level = rng.choice(_LEVELS)
        what = rng.choice(_WORDS)
        if rng.random() < 0.04:
            out.append(f"{_stamp(rng, base)} INFO  ops-{rng.randint(1, 9)} {fact(rng)}")
            continue
        detail = (
            f"{rng.choice(_VERBS)} {what} {rng.randint(100, 99_999)} in {rng.randint(1, 999)}ms"
            if level in ("INFO", "DEBUG")
            else f"{what} {rng.randint(100, 9999)} {rng.choice(('slow', 'failed', 'retrying'))}: "
            f"{rng.choice(_WORDS)} error code {rng.randint(400, 599)}"
        )
        out.append(
            f"{_stamp(rng, base)} {level:5} {rng.choice(_MODULES)}-{rng.randint(1, 9)} {detail}"
        )
    return "\n".join(out)


def tests_output(rng: Random, tests: int) -> str:
    """A pytest-style run: dots, a failure or two with an assertion message, a summary line."""
    failures = [i for i in range(tests) if rng.random() < 0.08]
    module = rng.choice(_MODULES)
    lines = [
        f"collected {tests} items",
        f"tests/test_{module}.py " + "".join("F" if i in failures else "." for i in range(tests)),
    ]
    for _ in failures:
        name = _ident(rng)
        lines += [
            f"___ test_{name} ___",
            f"    assert {rng.choice(_WORDS)}.{_ident(rng)}() == {rng.randint(0, 500)}",
            f"E   AssertionError: expected {rng.randint(0, 500)}, got {rng.randint(0, 500)}",
            f"tests/test_{module}.py:{rng.randint(10, 900)}: AssertionError",
        ]
    passed = tests - len(failures)
    lines.append(
        f"{len(failures)} failed, {passed} passed in {rng.randint(1, 90)}.{rng.randint(0, 99):02d}s"
    )
    return "\n".join(lines)


def grep_hits(rng: Random, hits: int, pattern: str) -> str:
    """`path:line: text` matches for `pattern`."""
    return "\n".join(
        f"src/{rng.choice(_MODULES)}/{rng.choice(_WORDS)}.py:{rng.randint(1, 800)}:    "
        f"{rng.choice(_WORDS)} = {pattern}({rng.choice(_WORDS)}, {rng.randint(0, 99)})"
        for _ in range(hits)
    )


def listing(rng: Random, entries: int) -> str:
    """A directory listing with sizes."""
    return "\n".join(
        f"{rng.randint(100, 99_999):>7}  {rng.choice(_WORDS)}_{rng.choice(_WORDS)}."
        f"{rng.choice(('py', 'md', 'toml', 'json', 'yaml'))}"
        for _ in range(entries)
    )


def cjk_log(rng: Random, lines: int) -> str:
    """Chinese service log lines: one CJK ideograph costs about a token, so these weigh in."""
    out = []
    base = rng.randint(0, 10**6)
    for _ in range(lines):
        if rng.random() < 0.06:
            out.append(
                f"备注：{rng.choice(_HAN)}{rng.choice(_HAN)}的上限为 {rng.randint(2, 9000)}。"
            )
            continue
        level = rng.choice(("信息", "信息", "调试", "警告", "错误"))
        out.append(
            f"{_stamp(rng, base)} {level} {rng.choice(_HAN)}-{rng.randint(1, 9)}："
            f"{rng.choice(_HAN_VERBS)}{rng.choice(_HAN)}{rng.randint(100, 9999)}，"
            f"耗时{rng.randint(1, 999)}毫秒，{rng.choice(_HAN)}{rng.choice(_HAN)}正常"
        )
    return "\n".join(out)


def japanese_notes(rng: Random, lines: int) -> str:
    """Japanese design notes mixing kana, kanji and identifiers."""
    out = []
    for _ in range(lines):
        out.append(
            f"・{rng.choice(_KANA)}の{rng.choice(_KANA)}は{rng.randint(1, 500)}件ごとに"
            f"{rng.choice(_HAN)}を{rng.choice(_HAN_VERBS)}します（{_ident(rng)}）。"
        )
    return "\n".join(out)


# -- images -------------------------------------------------------------------------------------


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@lru_cache(maxsize=16)
def _canvas(width: int, height: int) -> bytes:
    """The IDAT payload of a blank RGB image (computed once per size)."""
    row = b"\x00" + b"\xff" * (3 * width)
    return zlib.compress(row * height, 9)


def png_image(width: int, height: int, text: str) -> bytes:
    """A valid PNG of `width` x `height` whose visible content is described by `text`."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    described = b"Description\x00" + text.encode("latin-1", "replace")
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"tEXt", described)
        + _chunk(b"IDAT", _canvas(width, height))
        + _chunk(b"IEND", b"")
    )


def screenshot(width: int, height: int, text: str) -> ImagePart:
    """`png_image` as an `ImagePart`."""
    return ImagePart(media_type="image/png", data=png_image(width, height, text))


def image_text(image: ImagePart) -> str | None:
    """What a vision model reads in `image` (its `tEXt` description), or `None`."""
    data = image.data
    if data is None or not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    at = 8
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Description\x00"):
            return body[len(b"Description\x00") :].decode("latin-1")
        at += 12 + length
    return None
