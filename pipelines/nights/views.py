"""One night's tables as DuckDB views: the SQL ``gguf-audit sql`` runs and the scan summary prints.

A night's picture (:mod:`~gguf_audit.pipelines.nights.picture`) is not "the rows whose
``run_id`` is the night" for every table: ``files``, ``models`` and ``runs``
hold a row per night, but a file's ``tensors``, ``metadata``, ``samples`` and
``problems`` (scope ``file``) stay in the partition of the night that read it
(``files.source_run_id``), and a model's ``problems`` (scope ``model``) and
``compare`` rows in that of the night that judged it (``models.source_run_id``,
null in early nights for "this night"). ``WHERE run_id = '<night>'`` on those
tables misses every carried row. The views below join through the night's
``files`` and ``models`` rows instead, and show each row as the picture does:
``run_id`` the night (``source_run_id`` still names the night that read it) and
a detail row's ``model_id`` the night's grouping of its file.

Pure: text in, SQL text out. ``docs/tables.md`` has the same views for polars and pandas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["VIEW_NAMES", "night_views", "sql_literal", "views_needed"]

VIEW_NAMES: Final = ("runs", "files", "models", "tensors", "metadata", "samples", "problems", "compare", "mirror")
"""Every view, in the order they are created (each after those it reads)."""

_NEEDS: Final = {
    "runs": (),
    "files": (),
    "models": (),
    "tensors": ("files",),
    "metadata": ("files",),
    "samples": ("files",),
    "problems": ("files", "models"),
    "compare": ("models",),
    "mirror": (),
}


def sql_literal(text: str) -> str:
    """``text`` as a SQL string literal (quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def views_needed(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` with the views they read, in creation order; a name that is no view is a ValueError."""
    wanted: set[str] = set()
    for name in names:
        if name not in _NEEDS:
            raise ValueError(f"no view named {name!r}; the views are {', '.join(VIEW_NAMES)}. Got {name!r}.")
        wanted.add(name)
        wanted.update(_NEEDS[name])
    return tuple(v for v in VIEW_NAMES if v in wanted)


def _in(column: str, run_ids: Sequence[str] | None) -> str:
    """A partition filter that lets the reader skip other nights' data files (none when ``run_ids`` is None)."""
    if run_ids is None:
        return ""
    listed = ", ".join(sql_literal(r) for r in sorted(set(run_ids))) or "NULL"
    return f" AND {column} IN ({listed})"


def night_views(
    table_uris: dict[str, str],
    run_id: str,
    *,
    names: Iterable[str] = VIEW_NAMES,
    file_sources: Sequence[str] | None = None,
    model_sources: Sequence[str] | None = None,
    empty: Iterable[str] = (),
) -> list[str]:
    """``CREATE OR REPLACE TEMP VIEW`` statements for night ``run_id``, one per view of ``names`` (and what they read).

    ``table_uris`` maps each table to what ``delta_scan`` reads (a path or an
    ``s3://`` URL). ``file_sources`` and ``model_sources``, when given, are the
    nights the night's ``files`` and ``models`` rows point at: the detail views
    then read only those partitions. A table in ``empty`` (never written, such
    as ``compare`` in an output made before it existed) is a view over
    ``_empty_<table>``, which the caller registers.
    """
    night = sql_literal(run_id)
    missing = set(empty)

    def scan(table: str) -> str:
        if table in missing:
            return f"_empty_{table}"
        return f"delta_scan({sql_literal(table_uris[table])})"

    by_file = _in("d.run_id", file_sources)
    by_model = _in("d.run_id", model_sources)
    judged = "coalesce(m.source_run_id, m.run_id)"
    bodies = {
        "runs": f"SELECT * FROM {scan('runs')} WHERE run_id = {night}",
        "files": f"SELECT * FROM {scan('files')} WHERE run_id = {night}",
        "models": f"SELECT * FROM {scan('models')} WHERE run_id = {night}",
        "mirror": f"SELECT * FROM {scan('mirror')} WHERE run_id = {night}",
        "problems": (
            "SELECT d.* REPLACE (f.model_id AS model_id, f.run_id AS run_id) "
            f"FROM {scan('problems')} d JOIN files f ON d.url = f.url AND d.run_id = f.source_run_id "
            f"WHERE d.scope = 'file'{by_file} "
            "UNION ALL BY NAME "
            "SELECT d.* REPLACE (m.run_id AS run_id) "
            f"FROM {scan('problems')} d JOIN models m ON d.model_id = m.model_id AND d.run_id = {judged} "
            f"WHERE d.scope = 'model'{by_model}"
        ),
        "compare": (
            "SELECT d.* REPLACE (m.run_id AS run_id) "
            f"FROM {scan('compare')} d JOIN models m ON d.model_id = m.model_id AND d.run_id = {judged} "
            f"WHERE true{by_model}"
        ),
    }
    for table in ("tensors", "metadata", "samples"):
        bodies[table] = (
            "SELECT d.* REPLACE (f.model_id AS model_id, f.run_id AS run_id) "
            f"FROM {scan(table)} d JOIN files f ON d.url = f.url AND d.run_id = f.source_run_id "
            f"WHERE true{by_file}"
        )
    return [f"CREATE OR REPLACE TEMP VIEW {name} AS {bodies[name]};" for name in views_needed(names)]
