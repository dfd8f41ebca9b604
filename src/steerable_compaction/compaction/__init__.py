"""Pure compaction planning: regions, the prune stage, the summary request, the plan.

Nothing here does I/O: it turns a projection, a policy and meter readings into decisions and
exact requests; `CompactionHooks` performs them.
"""

from __future__ import annotations

from .plan import FoldRewrite, NothingToDo, Plan, PlanSettings, SummaryNeeded, plan_compaction
from .prune import (
    FOLD_PREFIX,
    OFFLOAD_PREFIX,
    PruneResult,
    fold_marker,
    image_pointer,
    is_folded,
    prune,
)
from .regions import (
    PairIssues,
    Regions,
    call_sites,
    newest_turn,
    pair_issues,
    repair_tool_pairs,
    select_regions,
)
from .summary import (
    SECTIONS,
    SUMMARY_INSTRUCTION,
    SummaryRequest,
    build_summary_request,
    excerpt_summary,
    kept_user_messages,
    summary_message,
    text_pointer_span,
)

__all__ = [
    "FOLD_PREFIX",
    "OFFLOAD_PREFIX",
    "SECTIONS",
    "SUMMARY_INSTRUCTION",
    "FoldRewrite",
    "NothingToDo",
    "PairIssues",
    "Plan",
    "PlanSettings",
    "PruneResult",
    "Regions",
    "SummaryNeeded",
    "SummaryRequest",
    "build_summary_request",
    "call_sites",
    "excerpt_summary",
    "fold_marker",
    "image_pointer",
    "is_folded",
    "kept_user_messages",
    "newest_turn",
    "pair_issues",
    "plan_compaction",
    "prune",
    "repair_tool_pairs",
    "select_regions",
    "summary_message",
    "text_pointer_span",
]
