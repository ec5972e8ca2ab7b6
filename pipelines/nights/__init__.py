"""Committed nights read back: the picture of a night, its views, diffs between nights, exports."""

from __future__ import annotations

from gguf_audit.pipelines.nights.diff import Alerts, alerts, diff_nights, match_problems
from gguf_audit.pipelines.nights.duplicates import (
    DUPLICATE_COLUMNS,
    DuplicateFile,
    DuplicateGroup,
    duplicate_groups,
    night_duplicates,
)
from gguf_audit.pipelines.nights.export import check_writable, export_night, night_jsonl, night_sarif, write_text
from gguf_audit.pipelines.nights.mirror import mirror_changes, night_mirror
from gguf_audit.pipelines.nights.nightview import (
    PROBLEM_COLUMNS,
    compare_stats,
    file_derivations,
    file_rows,
    model_rows,
    night_problems,
    night_summary,
    night_templates,
    nights,
    previous_night,
    row_llama_cpp,
)
from gguf_audit.pipelines.nights.picture import NightNotFound, night_row, picture, picture_table
from gguf_audit.pipelines.nights.views import VIEW_NAMES, night_views, sql_literal, views_needed

__all__ = [
    "DUPLICATE_COLUMNS",
    "PROBLEM_COLUMNS",
    "VIEW_NAMES",
    "Alerts",
    "DuplicateFile",
    "DuplicateGroup",
    "NightNotFound",
    "alerts",
    "check_writable",
    "compare_stats",
    "diff_nights",
    "duplicate_groups",
    "export_night",
    "file_derivations",
    "file_rows",
    "match_problems",
    "mirror_changes",
    "model_rows",
    "night_duplicates",
    "night_jsonl",
    "night_mirror",
    "night_problems",
    "night_row",
    "night_sarif",
    "night_summary",
    "night_templates",
    "night_views",
    "nights",
    "picture",
    "picture_table",
    "previous_night",
    "row_llama_cpp",
    "sql_literal",
    "views_needed",
    "write_text",
]
