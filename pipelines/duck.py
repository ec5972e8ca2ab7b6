"""DuckDB with its ``delta`` extension loaded from the ``duckdb-ext-delta`` wheel: offline, never downloaded.

DuckDB reads Delta tables with ``delta_scan``; its extension normally comes
from DuckDB's extension server. The ``duckdb-ext-delta`` package ships the
extension built for one DuckDB release inside a wheel, so :func:`connect`
loads it from site-packages and turns off every automatic install.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

__all__ = ["DeltaExtensionMissing", "connect", "delta_extension_path"]

_DISTRIBUTION = "duckdb-ext-delta"


class DeltaExtensionMissing(ImportError):
    """DuckDB's delta extension is not installed for this DuckDB (``pip install duckdb-ext-delta``)."""


def delta_extension_path() -> str:
    """The installed ``delta.duckdb_extension`` built for the running DuckDB's version."""
    import duckdb  # optional dependency (the pipeline and test extras)

    try:
        files = metadata.distribution(_DISTRIBUTION).files or []
    except metadata.PackageNotFoundError as exc:
        raise DeltaExtensionMissing(f"the {_DISTRIBUTION} package is not installed. Got {_DISTRIBUTION!r}.") from exc
    wanted = f"/v{duckdb.__version__}/"
    found = [f for f in files if str(f).endswith("delta.duckdb_extension")]
    matching = [f for f in found if wanted in f"/{f}"] or found
    if not matching:
        raise DeltaExtensionMissing(f"{_DISTRIBUTION} holds no delta.duckdb_extension. Got {_DISTRIBUTION!r}.")
    return str(metadata.distribution(_DISTRIBUTION).locate_file(matching[0]))


def connect() -> Any:
    """A DuckDB connection that can ``delta_scan``, with the extension loaded from the wheel (raises
    DeltaExtensionMissing without it)."""
    import duckdb

    path = delta_extension_path()
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"})
    try:
        con.execute(f"LOAD '{path}'")
    except duckdb.Error:
        con.close()
        raise
    return con
