"""DuckDB with its extensions loaded from the ``duckdb-ext-*`` wheels: offline, never downloaded.

DuckDB reads Delta tables with ``delta_scan`` and S3 through ``httpfs`` and
``aws``; those extensions normally come from DuckDB's extension server. The
``duckdb-ext-delta`` (``-httpfs``, ``-aws``) packages ship each extension
built for one DuckDB release inside a wheel, so :func:`connect` loads them
from site-packages and turns off every automatic install.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import Any

__all__ = ["DeltaExtensionMissing", "connect", "delta_extension_path", "extension_path"]


class DeltaExtensionMissing(ImportError):
    """A DuckDB extension is not installed for this DuckDB (``pip install duckdb-ext-NAME``)."""


def extension_path(name: str) -> str:
    """The installed ``NAME.duckdb_extension`` built for the running DuckDB's version."""
    import duckdb  # optional dependency (the pipeline and test extras)

    distribution = f"duckdb-ext-{name}"
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError as exc:
        raise DeltaExtensionMissing(f"the {distribution} package is not installed. Got {distribution!r}.") from exc
    wanted = f"/v{duckdb.__version__}/"
    found = [f for f in files if str(f).endswith(f"/{name}.duckdb_extension")]
    matching = [f for f in found if wanted in f"/{f}"] or found
    if not matching:
        raise DeltaExtensionMissing(f"{distribution} holds no {name}.duckdb_extension. Got {distribution!r}.")
    return str(metadata.distribution(distribution).locate_file(matching[0]))


def delta_extension_path() -> str:
    """The installed ``delta.duckdb_extension`` built for the running DuckDB's version."""
    return extension_path("delta")


def connect(extensions: Sequence[str] = ("delta",)) -> Any:
    """A DuckDB connection with ``extensions`` loaded from their wheels (raises DeltaExtensionMissing
    without one). ``("delta", "httpfs", "aws")`` reads tables on S3."""
    import duckdb

    paths = [extension_path(name) for name in extensions]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"})
    try:
        for path in paths:
            con.execute(f"LOAD '{path}'")
    except duckdb.Error:
        con.close()
        raise
    return con
