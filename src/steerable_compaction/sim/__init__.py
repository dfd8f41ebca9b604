"""The evaluation simulator (spec layer L1.5): strategy arms over seeded sessions with needles.

```python
from steerable_compaction.sim import run_eval

results = run_eval(["light", "heavy"], ["naive", "current", "codex"], seed=0)
for run in results.runs:
    print(run.task, run.arm, run.recall, run.summary_cache_hit_rate, run.prompt_tokens)
```

`steerable-compaction eval` runs it from the command line and writes `results.json` and a chart;
`standard.md` (next to this file) defines every metric.
"""

from __future__ import annotations

from .runner import ARM_NAMES, ARMS, PEER_ARMS, EvalResults, RunResult, run_eval, run_session
from .summarizer import ExtractiveSummarizer
from .tasks import TASK_NAMES, Needle, Task, build_task

__all__ = [
    "ARMS",
    "ARM_NAMES",
    "PEER_ARMS",
    "TASK_NAMES",
    "EvalResults",
    "ExtractiveSummarizer",
    "Needle",
    "RunResult",
    "Task",
    "build_task",
    "run_eval",
    "run_session",
]
