# ruff: noqa: RUF001 - the Chinese and Japanese strings use fullwidth punctuation on purpose
"""Regenerate the machine-made corpora (JSON, shell output, agent transcripts) deterministically.

Run: `python benchmarks/corpora/generate.py`. The prose, code and CJK corpora are hand-written
and committed as they are; this script writes `api_response.json`, `shell_git.txt` and the
`transcript_*.json` files from a fixed seed, so the same bytes come out on every machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

VERBS = ["loading", "saving", "parsing", "resizing", "exporting", "syncing", "renaming", "merging"]
NOUNS = ["config", "snapshot", "profile", "archive", "thumbnail", "session", "workspace", "index"]
ADJS = ["empty", "nested", "large", "unicode", "read-only", "stale", "partial", "encrypted"]
NAMES = ["ana", "bo", "chidi", "dana", "elif", "farid", "greta", "hiro", "ines", "jonas"]
LABELS = ["bug", "needs-triage", "performance", "docs", "good first issue", "regression"]
SENTENCES = [
    "Steps to reproduce are in the attached log.",
    "It started after upgrading to the latest release.",
    "The same file works fine on the previous version.",
    "I can reproduce it on Linux and macOS but not on Windows.",
    "Setting the cache size to zero makes the problem go away.",
    "The stack trace points at the decoder, line 212.",
    "Memory grows steadily until the process is killed.",
    "A workaround is to restart the worker every hour.",
]


def _sha(i: int, salt: str = "") -> str:
    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def api_response(rng: random.Random) -> str:
    """A paginated issue-tracker API response, pretty-printed as a tool would return it."""
    start = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    items: list[dict[str, Any]] = []
    for i in range(24):
        num = 4100 + i * 7
        created = start + timedelta(hours=rng.randint(1, 4000), seconds=rng.randint(0, 3599))
        user = rng.choice(NAMES)
        items.append(
            {
                "id": 900_000_000 + rng.randint(0, 99_999_999),
                "node_id": _sha(num, "node")[:20],
                "number": num,
                "title": (f"Crash when {rng.choice(VERBS)} {rng.choice(ADJS)} {rng.choice(NOUNS)}"),
                "state": rng.choice(["open", "open", "closed"]),
                "user": {"login": user, "id": rng.randint(1000, 999_999), "site_admin": False},
                "labels": [{"name": n, "color": _sha(len(n))[:6]} for n in rng.sample(LABELS, 2)],
                "comments": rng.randint(0, 40),
                "created_at": created.isoformat().replace("+00:00", "Z"),
                "updated_at": (created + timedelta(days=rng.randint(0, 90)))
                .isoformat()
                .replace("+00:00", "Z"),
                "url": f"https://tracker.example.com/api/v2/repos/acme/widget/issues/{num}",
                "body": " ".join(rng.sample(SENTENCES, 3)),
                "reactions": {"+1": rng.randint(0, 12), "eyes": rng.randint(0, 3), "total": 0},
                "milestone": None if rng.random() < 0.5 else {"title": f"v2.{rng.randint(0, 9)}"},
            }
        )
    payload = {"total_count": 1375, "page": 3, "per_page": 24, "items": items}
    return json.dumps(payload, indent=2) + "\n"


def shell_git(rng: random.Random) -> str:
    """`git log`, `git status`, `ls -la`, a diff and a pytest run, as a terminal prints them."""
    out: list[str] = ["$ git log --stat -n 16"]
    when = datetime(2024, 11, 4, 17, 2, 11)
    files = ["src/widget/decoder.py", "src/widget/cache.py", "tests/test_cache.py", "README.md"]
    for i in range(16):
        when -= timedelta(hours=rng.randint(2, 30), minutes=rng.randint(0, 59))
        who = rng.choice(NAMES)
        out += [
            f"commit {_sha(i, 'commit')}",
            f"Author: {who.title()} <{who}@example.org>",
            f"Date:   {when:%a %b %d %H:%M:%S %Y} +0100",
            "",
            f"    Fix {rng.choice(ADJS)} {rng.choice(NOUNS)} handling in the "
            f"{rng.choice(NOUNS)} {rng.choice(VERBS).removesuffix('ing')}er",
            "",
        ]
        touched = rng.sample(files, 2)
        for f in touched:
            plus, minus = rng.randint(1, 60), rng.randint(0, 30)
            out.append(f" {f:<28} | {plus + minus:>3} {'+' * (plus // 4)}{'-' * (minus // 4)}")
        out += [" 2 files changed, 41 insertions(+), 12 deletions(-)", ""]
    out += [
        "$ git status",
        "On branch fix/cache-eviction",
        "Your branch is ahead of 'origin/fix/cache-eviction' by 2 commits.",
        '  (use "git push" to publish your local commits)',
        "",
        "Changes not staged for commit:",
        '  (use "git add <file>..." to update what will be committed)',
        "\tmodified:   src/widget/cache.py",
        "\tmodified:   tests/test_cache.py",
        "",
        "Untracked files:",
        "\tnotes/eviction.md",
        "",
        "$ ls -la src/widget",
    ]
    out.append("total 184")
    for name in ["__init__.py", "cache.py", "cli.py", "decoder.py", "encoder.py", "errors.py"]:
        size = rng.randint(300, 30_000)
        out.append(
            f"-rw-r--r--  1 dana staff {size:>6} Nov  {rng.randint(1, 4)} "
            f"{rng.randint(8, 19):02d}:{rng.randint(0, 59):02d} {name}"
        )
    out += [
        "",
        "$ git diff src/widget/cache.py",
        "diff --git a/src/widget/cache.py b/src/widget/cache.py",
        f"index {_sha(1, 'a')[:7]}..{_sha(2, 'b')[:7]} 100644",
        "--- a/src/widget/cache.py",
        "+++ b/src/widget/cache.py",
        "@@ -88,14 +88,19 @@ class LruCache:",
        "     def put(self, key: str, value: bytes) -> None:",
        "-        if len(self._data) >= self.capacity:",
        "-            self._data.popitem(last=False)",
        "+        size = len(value)",
        "+        if size > self.max_bytes:",
        "+            raise ValueError(f'entry of {size} bytes exceeds {self.max_bytes}')",
        "+        while self._bytes + size > self.max_bytes and self._data:",
        "+            _, old = self._data.popitem(last=False)",
        "+            self._bytes -= len(old)",
        "         self._data[key] = value",
        "+        self._bytes += size",
        "         self._data.move_to_end(key)",
        "",
        "$ python -m pytest -q tests/test_cache.py",
    ]
    results = "".join(rng.choice("....F.") for _ in range(46))
    out += [
        f"{results}                    [100%]",
        "=================================== FAILURES ===================================",
        "_________________________ test_eviction_respects_bytes _________________________",
        "",
        "    def test_eviction_respects_bytes() -> None:",
        "        cache = LruCache(capacity=10, max_bytes=100)",
        "        for i in range(20):",
        "            cache.put(f'k{i}', b'x' * 10)",
        ">       assert cache.total_bytes() <= 100",
        "E       assert 110 <= 100",
        "E        +  where 110 = <bound method LruCache.total_bytes of <widget.cache.LruCache "
        "object at 0x7f3a2c1e9d90>>()",
        "",
        "tests/test_cache.py:57: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_cache.py::test_eviction_respects_bytes - assert 110 <= 100",
        f"{results.count('F')} failed, {results.count('.')} passed in 0.{rng.randint(10, 99)}s",
        "",
    ]
    return "\n".join(out)


def misc_formats(rng: random.Random) -> str:
    """Awkward formats: base64, UUIDs, CSV, a Markdown table, HTML, camelCase JS, accents."""
    blob = bytes(rng.randrange(256) for _ in range(900))
    out = ["data:image/png;base64," + base64.b64encode(blob).decode(), ""]
    out += [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(12)]
    out += ["", "timestamp,sensor_id,temperature_c,humidity_pct,pressure_hpa"]
    for i in range(30):
        out.append(
            f"2024-06-{1 + i // 24:02d}T{i % 24:02d}:00:00Z,{rng.randint(100, 999)},"
            f"{rng.uniform(-5, 35):.2f},{rng.uniform(20, 95):.1f},{rng.uniform(980, 1040):.1f}"
        )
    out += ["", "| package | version | size (kB) | license |", "|---|---|---:|---|"]
    for name in NOUNS:
        out.append(
            f"| {name}-utils | {rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
            f" | {rng.randint(5, 900)} | {rng.choice(['MIT', 'Apache-2.0', 'BSD-3'])} |"
        )
    out += [
        "",
        '<div class="card"><h2 id="summary">Build summary</h2>',
        '  <ul class="list-unstyled">',
    ]
    for name in NOUNS:
        out.append(f'    <li data-step="{name}"><span class="badge ok">passed</span> {name}</li>')
    out += ["  </ul>", "</div>", ""]
    for name in NOUNS:
        cap = name.title()
        out += [
            f"export async function fetch{cap}ById(apiClient, {name}Id, {{ signal }} = {{}}) {{",
            f"  const response = await apiClient.get(`/api/{name}s/${{{name}Id}}`, {{ signal }});",
            "  if (!response.ok) throw new HttpError(response.status, response.statusText);",
            f"  return normalize{cap}(await response.json());",
            "}",
        ]
    out += [
        "",
        "Résumé: la réunion de février a été déplacée; voir les détails ci-dessous.",
        "Straße, Größe, Übersicht, Änderung: Umlaute und ß in einem deutschen Satz.",
        "Привет! Это короткий пример текста на русском языке для проверки оценки.",
        "Arrows → and ← and ellipsis … and “curly quotes” and a check mark ✓ and emoji 🚀🙂.",
        "",
    ]
    return "\n".join(out)


def _tool_call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    call_id = "call_" + _sha(i, "call")[:24]
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": json.dumps(args)}


def _msg(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _result(call: dict[str, Any], text: str) -> dict[str, Any]:
    return {"type": "tool_result", "call_id": call["id"], "content": [_text(text)]}


def transcript(
    seed: int, system: str, goal: str, thoughts: list[str], rng: random.Random
) -> list[dict[str, Any]]:
    """An agent session: a goal, then rounds of assistant text + tool calls + tool results."""
    code = (HERE / "python_code.txt").read_text().splitlines()
    shell = shell_git(random.Random(seed)).splitlines()
    api = api_response(random.Random(seed)).splitlines()
    messages = [_msg("system", _text(system)), _msg("user", _text(goal))]
    for i, thought in enumerate(thoughts):
        kind = i % 3
        if kind == 0:
            lo = rng.randrange(0, len(code) - 60)
            n = rng.randint(25, 60)
            call = _tool_call(seed * 100 + i, "read_file", {"path": "src/sched.py", "start": lo})
            body = "\n".join(f"{lo + k + 1:>4}  {line}" for k, line in enumerate(code[lo : lo + n]))
        elif kind == 1:
            lo = rng.randrange(0, len(shell) - 30)
            call = _tool_call(seed * 100 + i, "run_shell", {"command": "git log --stat -n 8"})
            body = "\n".join(shell[lo : lo + rng.randint(15, 30)])
        else:
            lo = rng.randrange(0, len(api) - 50)
            call = _tool_call(
                seed * 100 + i,
                "http_get",
                {"url": "https://tracker.example.com/api/v2/issues", "params": {"page": 3}},
            )
            body = "\n".join(api[lo : lo + rng.randint(20, 50)])
        messages.append(_msg("assistant", _text(thought), call))
        messages.append(_msg("tool", _result(call, body)))
    return messages


EN_THOUGHTS = [
    "I'll start by reading the scheduler module to see how retries are scheduled.",
    "The backoff looks right. Let me check the recent history for related changes.",
    "Let me look at the open issues that mention the scheduler crashing.",
    "The retry path pushes the job back with a new not_before; reading the drain loop next.",
    "Two commits touched the cache this week. I want to see the failing test output.",
    "Issue 4121 describes the same symptom: jobs stuck after a cancelled run.",
    "I think the bug is that cancelled jobs are never removed from the heap. Checking _load.",
    "Running the history again to confirm which commit introduced the state field.",
    "Fetching the next page of issues to see whether anyone found a workaround.",
    "Reading the persistence code to make sure the fix survives a restart.",
    "Confirming the test run after the change.",
    "One more look at the API response to collect the affected issue numbers.",
]
ZH_THOUGHTS = [
    "我先读一下调度器模块，看看重试是怎么安排的。",
    "退避时间的计算看起来没有问题。我再查一下最近的提交记录，看看有没有相关改动。",
    "接下来看看问题列表里有没有提到调度器崩溃的报告。",
    "重试路径会用新的 not_before 把任务放回堆里；下面读一下 drain 循环。",
    "这周有两次提交改动了缓存，我想看看失败测试的输出。",
    "第 4121 号问题描述的症状和我们遇到的一样：取消运行以后任务卡住了。",
    "我认为问题在于被取消的任务从来没有从堆里移除。检查一下 _load 函数。",
    "再看一次提交历史，确认 state 字段是哪一次提交引入的。",
    "获取下一页问题列表，看看有没有人找到临时解决办法。",
    "阅读持久化相关的代码，确保修复在重启以后仍然有效。",
    "修改完成后再运行一次测试确认结果。",
]
JA_THOUGHTS = [
    "まずスケジューラのモジュールを読んで、リトライの仕組みを確認します。",
    "バックオフの計算は正しそうです。最近のコミット履歴も確認します。",
    "スケジューラのクラッシュに関する課題が登録されていないか見てみます。",
    "リトライ時には新しい not_before でジョブがヒープに戻されます。次は drain ループを読みます。",
    "今週キャッシュに関するコミットが二つありました。失敗したテストの出力を確認したいです。",
    "課題 4121 に同じ症状が書かれています。キャンセル後にジョブが止まってしまう問題です。",
    "キャンセルされたジョブがヒープから削除されていないのが原因だと思います。_load を確認します。",
    "state フィールドがどのコミットで追加されたのか、履歴をもう一度確認します。",
    "回避策が見つかっていないか、次のページの課題も取得します。",
]


def main() -> None:
    """Write every generated corpus next to this script."""
    (HERE / "api_response.json").write_text(api_response(random.Random(7)))
    (HERE / "shell_git.txt").write_text(shell_git(random.Random(11)))
    (HERE / "misc_formats.txt").write_text(misc_formats(random.Random(13)))
    sessions = {
        "transcript_en.json": (
            "You are a careful coding agent. Use the tools to inspect the repository before "
            "changing anything, and explain each step briefly.",
            "The job scheduler sometimes leaves cancelled jobs in the queue forever. Find the "
            "cause, fix it, and make sure the tests pass.",
            EN_THOUGHTS,
        ),
        "transcript_zh.json": (
            "你是一个细心的编程助手。修改代码之前先用工具检查仓库，并简要说明每一步。",
            "任务调度器有时会把已经取消的任务永远留在队列里。请找到原因并修复，确保测试通过。"
            "另外，请用中文总结你的发现。",
            ZH_THOUGHTS,
        ),
        "transcript_ja.json": (
            "あなたは慎重なコーディングエージェントです。変更する前にツールでリポジトリを調べ、"
            "各ステップを簡潔に説明してください。",
            "ジョブスケジューラが、キャンセル済みのジョブをキューに残し続けることがあります。"
            "原因を突き止めて修正し、テストが通ることを確認してください。",
            JA_THOUGHTS,
        ),
    }
    for seed, (name, (system, goal, thoughts)) in enumerate(sessions.items(), start=1):
        data = transcript(seed, system, goal, thoughts, random.Random(seed))
        (HERE / name).write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
