"""Pure compaction planning: regions, the prune stage, the summary request, the plan.

Nothing here does I/O: it turns a projection, a policy and meter readings into decisions and
exact requests; `CompactionHooks` performs them.
"""

from __future__ import annotations

from .plan import (
    FoldRewrite,
    NothingToDo,
    Plan,
    PlanSettings,
    SummaryNeeded,
    plan_compaction,
    plan_merge,
)
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
    is_summary,
    newest_turn,
    pair_issues,
    pinned_indices,
    repair_tool_pairs,
    select_regions,
)
from .summary import (
    FOCUS_LEAD,
    FOCUS_TAIL,
    INCREMENTAL_INSTRUCTION,
    MERGE_INSTRUCTION,
    SECTIONS,
    SUMMARY_INSTRUCTION,
    SummaryRequest,
    build_summary_request,
    check_focus,
    excerpt_summary,
    instruction_focus,
    is_summary_instruction,
    kept_messages,
    kept_user_messages,
    summary_message,
    text_pointer_span,
    with_focus,
)

__all__ = [
    "FOCUS_LEAD",
    "FOCUS_TAIL",
    "FOLD_PREFIX",
    "INCREMENTAL_INSTRUCTION",
    "MERGE_INSTRUCTION",
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
    "check_focus",
    "excerpt_summary",
    "fold_marker",
    "image_pointer",
    "instruction_focus",
    "is_folded",
    "is_summary",
    "is_summary_instruction",
    "kept_messages",
    "kept_user_messages",
    "newest_turn",
    "pair_issues",
    "pinned_indices",
    "plan_compaction",
    "plan_merge",
    "prune",
    "repair_tool_pairs",
    "select_regions",
    "summary_message",
    "text_pointer_span",
    "with_focus",
]
