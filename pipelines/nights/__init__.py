"""Committed nights read back: the picture of a night, its views, diffs between nights, exports."""

from __future__ import annotations

from gguf_audit.pipelines.nights.diff import MODEL_COLUMNS, alerts, diff_nights
from gguf_audit.pipelines.nights.duplicates import DUPLICATE_COLUMNS, duplicate_groups
from gguf_audit.pipelines.nights.export import check_writable, export_night
from gguf_audit.pipelines.nights.mirror import night_mirror
from gguf_audit.pipelines.nights.nightview import (
    compare_stats,
    file_derivations,
    file_rows,
    model_rows,
    night_problems,
    night_summary,
    night_templates,
    nights,
    previous_night,
    problems_of,
    row_llama_cpp,
)
from gguf_audit.pipelines.nights.picture import night_row, picture
from gguf_audit.pipelines.nights.views import VIEW_NAMES, night_views, sql_literal

__all__ = [
    "DUPLICATE_COLUMNS",
    "MODEL_COLUMNS",
    "VIEW_NAMES",
    "alerts",
    "check_writable",
    "compare_stats",
    "diff_nights",
    "duplicate_groups",
    "export_night",
    "file_derivations",
    "file_rows",
    "model_rows",
    "night_mirror",
    "night_problems",
    "night_row",
    "night_summary",
    "night_templates",
    "night_views",
    "nights",
    "picture",
    "previous_night",
    "problems_of",
    "row_llama_cpp",
    "sql_literal",
]
