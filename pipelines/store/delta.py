"""The Delta tables of one output, through deltalake (delta-rs): open, create, commit written files, read, delete.

Every audit table is a Delta table at ``OUT/<table>/``, partitioned by
``run_id``, with the explicit schema of :data:`~gguf_audit.tables.schema.SCHEMAS`.
Data files are written beforehand (:mod:`~gguf_audit.pipelines.store.parts`); a
commit only adds them to the table's log, in one atomic log entry: a put of
``_delta_log/<version>.json`` that fails if the version exists (a rename
without overwrite on a local disk, a conditional ``If-None-Match`` put on
S3). Nothing is renamed or copied.

A table whose schema lacks columns a newer gguf-audit added is evolved before
the commit (``ALTER TABLE ADD COLUMNS``): the earlier files read the new
columns as null, so their rows stay reusable.

deltalake talks to object stores through its own client (object_store), so
it takes its own storage options: :func:`delta_storage_options` derives them
from the fsspec options of ``--out`` (endpoint, region); credentials come from
the environment, as for fsspec.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Field, Schema, Transaction
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from gguf_audit.io.options import s3_allows_http, s3_endpoint, s3_region
from gguf_audit.pipelines.store.parts import PartFile
from gguf_audit.tables.schema import PARTITION_COLUMN, SCHEMAS, TABLE_NAMES

__all__ = [
    "FENCE_APP_ID",
    "RUN_ID_KEY",
    "STORE_ERRORS",
    "DeltaTables",
    "Fence",
    "delta_storage_options",
    "one_line",
    "scan_batches",
    "scan_table",
    "table_uri",
]

FENCE_APP_ID: Final = "gguf-audit-lease"
"""The Delta application transaction every commit under a lease carries, its version the lease's generation
(``DeltaTable.transaction_version``): the fencing token (:meth:`DeltaTables.fence_all`)."""
RUN_ID_KEY: Final = "gguf_audit.run_id"
"""Commit metadata naming the run a commit belongs to (``DESCRIBE HISTORY`` shows it)."""
PARTITION_BY: Final = [PARTITION_COLUMN]
BATCH_ROWS: Final = 4096
"""Rows per record batch when the driver streams a table (:meth:`DeltaTables.batches`)."""
WINDOW_ROWS: Final = 1024
"""Rows of a data file the driver streams at a time: a row group of its own files (:func:`_row_group_windows`)."""
STREAM: Final = {"use_threads": False, "batch_readahead": 1, "fragment_readahead": 1}
"""How the driver streams a table: decoded on its own thread, a batch ahead. With pyarrow's threads the
readahead settings do not hold: the scan decodes every data file ahead of a slower reader."""


def table_uri(out_url: str, table: str) -> str:
    """Where deltalake finds ``table`` of the output ``out_url`` (an absolute path for a local one)."""
    if "://" not in out_url or out_url.startswith("file://"):
        return os.path.join(os.path.abspath(out_url.removeprefix("file://")), table)
    return f"{out_url.rstrip('/')}/{table}"


STORE_ERRORS: Final = (OSError, ValueError, DeltaError)
"""What deltalake and fsspec raise when a store refuses (object_store's errors are OSErrors or DeltaErrors)."""

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True, slots=True)
class Fence:
    """A writer's lease as a commit sees it: ``check`` raises when the lease was lost; ``token`` its generation."""

    check: Callable[[], None]
    token: int


def _no_check() -> None:
    """The fencing writer's own commits: it has just taken the lease."""


def one_line(text: str) -> str:
    """A store's error as one plain line: delta-rs's span several, with terminal colours and arrows."""
    lines = [line.strip(" ↳") for line in _ANSI.sub("", text).splitlines()]
    return "; ".join(line for line in lines if line)[:300]


def delta_storage_options(out_url: str, fsspec_options: Mapping[str, Any] | None) -> dict[str, str]:
    """deltalake's storage options for ``out_url``, from the fsspec ones (no credentials: those are in the env).

    For S3: the endpoint (``client_kwargs.endpoint_url``, else the standard
    ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``) becomes ``AWS_ENDPOINT_URL``,
    with ``AWS_ALLOW_HTTP`` for ``http://`` (or when the environment sets it);
    the region (``client_kwargs.region_name``, else ``AWS_REGION`` or
    ``AWS_DEFAULT_REGION``) becomes ``AWS_REGION``; ``anon`` becomes
    ``AWS_SKIP_SIGNATURE``. A ``delta`` table in the options
    (``[out_storage_options.delta]``) is passed as is.
    """
    options = dict(fsspec_options or {})
    out: dict[str, str] = {str(k): str(v) for k, v in dict(options.pop("delta", None) or {}).items()}
    if out_url.startswith(("s3://", "s3a://")):
        endpoint = s3_endpoint(options)
        if endpoint:
            out.setdefault("AWS_ENDPOINT_URL", endpoint)
        if s3_allows_http(out.get("AWS_ENDPOINT_URL", endpoint)):
            out.setdefault("AWS_ALLOW_HTTP", "true")
        region = s3_region(options)
        if region:
            out.setdefault("AWS_REGION", region)
        if options.get("anon"):
            out.setdefault("AWS_SKIP_SIGNATURE", "true")
    return out


def _add_action(part: PartFile) -> AddAction:
    return AddAction(
        part.path,
        part.size_bytes,
        {PARTITION_COLUMN: part.run_id},
        part.modified_ms,
        True,
        f'{{"numRecords":{part.rows}}}',
    )


class DeltaTables:
    """The nine Delta tables under one output URL."""

    def __init__(self, out_url: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.out_url = out_url
        self.storage_options = dict(storage_options or {})
        self._committed: dict[str, DeltaTable] = {}
        """The handle each table was last committed through, so a re-read costs only the newer log entries."""

    def uri(self, table: str) -> str:
        return table_uri(self.out_url, table)

    def open(self, table: str, version: int | None = None) -> DeltaTable | None:
        """The table (at ``version`` when given), or None when it was never created."""
        try:
            return DeltaTable(self.uri(table), version=version, storage_options=self.storage_options or None)
        except TableNotFoundError:
            return None

    def latest(self, table: str) -> DeltaTable | None:
        """The table at its latest version: the handle of this process's last commit brought up to date
        (reading only the log entries since), else opened afresh."""
        dt = self._committed.get(table)
        if dt is None:
            return self.open(table)
        dt.update_incremental()
        return dt

    def write_probe(self, name: str) -> str:
        """Create an empty Delta table named ``name`` under the output, as a commit writes its log; its URI.

        The preflight's write: the same client, options and conditional put a
        night's commit uses (an endpoint over plain HTTP without
        ``AWS_ALLOW_HTTP`` fails here, before anything is audited).
        """
        uri = table_uri(self.out_url, name)
        DeltaTable.create(uri, schema=pa.schema([("probe", pa.int32())]), storage_options=self.storage_options or None)
        return uri

    def version(self, table: str) -> int | None:
        dt = self.open(table)
        return None if dt is None else int(dt.version())

    def _properties(self, run_id: str, fence: Fence | None = None) -> CommitProperties:
        """A commit's metadata: its run, and with a lease its generation as the fencing transaction."""
        txns = None if fence is None else [Transaction(FENCE_APP_ID, fence.token)]
        return CommitProperties(custom_metadata={RUN_ID_KEY: run_id}, app_transactions=txns)

    def _evolve(self, dt: DeltaTable, table: str) -> None:
        """Add the columns the current schema has and the table lacks (nullable, at the end)."""
        have = {f.name for f in dt.schema().fields}
        wanted = Schema.from_arrow(SCHEMAS[table])
        missing: list[Field] = [f for f in wanted.fields if f.name not in have]
        if missing:
            dt.alter.add_columns(missing)

    def commit(self, table: str, parts: Sequence[PartFile], run_id: str, *, fence: Fence | None = None) -> int:
        """Add ``parts`` to ``table`` in one commit (creating the table on first use); the version it made.

        With no parts an existing table is left as it is (its version is
        returned) and a missing one is created empty, so every table can be read.
        With a ``fence`` (the writer's lease), its check runs after the table's
        snapshot is read and before the commit, and the commit carries the
        lease's generation as a Delta application transaction: should another
        writer fence the table in between (:meth:`fence_all`, on taking the
        lease over), delta-rs's conflict check refuses this commit.
        """
        actions = [_add_action(p) for p in parts]
        dt = self.open(table)
        if dt is None:
            if fence is not None:
                fence.check()
            try:
                self._create(table, actions, self._properties(run_id, fence))
                return 0
            except DeltaError:  # created meanwhile (a fencing writer): commit to it as to any table
                dt = self.open(table)
                if dt is None:
                    raise
        self._evolve(dt, table)
        self._committed[table] = dt
        if not actions:
            return int(dt.version())
        if fence is not None:
            fence.check()
        self._append(dt, table, actions, self._properties(run_id, fence))
        return int(dt.version())

    def _append(self, dt: DeltaTable, table: str, actions: Sequence[AddAction], props: CommitProperties) -> None:
        log_actions: list[AddAction | RemoveAction] = list(actions)
        dt.create_write_transaction(
            log_actions, mode="append", schema=SCHEMAS[table], partition_by=PARTITION_BY, commit_properties=props
        )
        dt.update_incremental()  # the handle does not move to the version it committed by itself

    def _create(self, table: str, actions: list[AddAction], props: CommitProperties) -> None:
        """Create ``table`` with ``actions`` as its version 0; fails if it exists (the log's first entry is
        written only if absent)."""
        create_table_with_add_actions(
            self.uri(table),
            Schema.from_arrow(SCHEMAS[table]),
            actions,
            mode="error",
            partition_by=PARTITION_BY,
            name=table,
            storage_options=self.storage_options or None,
            commit_properties=props,
        )

    def fence_all(self, token: int) -> None:
        """Fence every table for a writer that took over an expired lease: an empty commit each carrying the
        new generation ``token`` as :data:`FENCE_APP_ID`'s transaction (a missing table is created empty).

        A commit the lease's previous holder prepared from an earlier snapshot
        carries the same application id, so delta-rs's conflict check refuses it;
        for any snapshot read after this, that holder's lease check fails first.
        """
        fence = Fence(_no_check, token)
        for table in TABLE_NAMES:
            dt = self.open(table)
            if dt is None:
                with contextlib.suppress(DeltaError):  # or created meanwhile: fenced all the same below
                    self._create(table, [], self._properties(f"fence {token}", fence))
                dt = self.open(table)
                if dt is None:
                    raise OSError(f"cannot create the {table} table to fence it")
            self._append(dt, table, [], self._properties(f"fence {token}", fence))

    def delete_runs(self, table: str, run_ids: Sequence[str]) -> None:
        """Remove every row of ``run_ids`` from ``table`` (whole partitions: the log drops their files)."""
        dt = self.open(table)
        if dt is None or not run_ids:
            return
        listed = ", ".join("'" + r.replace("'", "''") + "'" for r in run_ids)
        dt.delete(f"{PARTITION_COLUMN} IN ({listed})")

    def dataset(self, table: str, run_ids: Sequence[str] | None = None, version: int | None = None) -> ds.Dataset:
        """``table`` as a pyarrow dataset (only the partitions of ``run_ids`` when given)."""
        dt = self.open(table, version)
        if dt is None or (run_ids is not None and not run_ids):
            return ds.dataset(SCHEMAS[table].empty_table())
        if run_ids is None:
            return dt.to_pyarrow_dataset()
        return dt.to_pyarrow_dataset(file_pruning_predicate=[(PARTITION_COLUMN, "in", list(run_ids))])

    def read(
        self,
        table: str,
        run_ids: Sequence[str] | None = None,
        *,
        columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pa.Table:
        """Rows of ``table`` as the current schema has them (columns older files lack are null)."""
        dataset = self.dataset(table, run_ids)
        data = scan_table(dataset, columns=_present(dataset, columns), filter=filter)
        return conform(data, table, columns)

    def batches(
        self,
        table: str,
        run_ids: Sequence[str] | None = None,
        *,
        columns: Sequence[str] | None = None,
        filter: ds.Expression | None = None,
        batch_rows: int = BATCH_ROWS,
    ) -> Iterator[pa.Table]:
        """:meth:`read`'s rows a record batch at a time (at most ``batch_rows`` each), so a reader holds one batch."""
        dataset = self.dataset(table, run_ids)
        for batch in scan_batches(dataset, columns=_present(dataset, columns), filter=filter, batch_rows=batch_rows):
            if batch.num_rows:
                yield conform(pa.Table.from_batches([batch]), table, columns)


def scan_table(
    dataset: ds.Dataset, *, columns: Sequence[str] | None = None, filter: ds.Expression | None = None
) -> pa.Table:
    """``dataset.to_table(columns, filter)``, also where a data file stores strings as ``string_view``.

    deltalake's own DML (``DeltaTable.update``, ``delete`` of some rows) rewrites data files with view types;
    pyarrow then cannot evaluate a filter comparing a string column of the table's schema with such a file's
    column ("no kernel matching input types (string, string_view)"). Those files are read whole, as the
    table's types, and filtered in memory (:func:`scan_batches`).
    """
    try:
        return dataset.to_table(columns=columns, filter=filter)
    except pa.ArrowNotImplementedError:
        if filter is None or not isinstance(dataset, ds.FileSystemDataset):
            raise
    batches = list(scan_batches(dataset, columns=columns, filter=filter))
    if not batches:
        return dataset.schema.empty_table().select(list(columns) if columns else dataset.schema.names)
    return pa.Table.from_batches(batches)


def scan_batches(
    dataset: ds.Dataset,
    *,
    columns: Sequence[str] | None = None,
    filter: ds.Expression | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """``dataset.to_batches(...)`` in the dataset's order, holding one data file's metadata at a time, also where
    a data file stores strings as ``string_view`` (see :func:`scan_table`).

    Each data file is scanned through a fragment made for that scan and let
    go of after it: the dataset's own fragments keep each file's Parquet
    metadata once scanned, held until the stream ends. A file of many row groups is scanned a window of them at
    a time (:func:`_row_group_windows`). A file whose types pyarrow refuses
    with ``filter`` is read in batches as the table's types and filtered in
    memory.
    """
    if not isinstance(dataset, ds.FileSystemDataset):
        yield from dataset.to_batches(columns=columns, filter=filter, batch_size=batch_rows, **STREAM)
        return
    for fragment in _fresh_fragments(dataset, filter):
        for window in _row_group_windows(fragment, WINDOW_ROWS):
            yield from _fragment_batches(window, dataset.schema, columns, filter, batch_rows)


def _fresh_fragments(dataset: ds.FileSystemDataset, filter: ds.Expression | None) -> Iterator[ds.Fragment]:
    """The data files ``filter`` may match (by their partition), each as a new fragment over the dataset's
    file system (deltalake's, which knows each file's size: no request to ask it)."""
    made = dataset.format.make_fragment
    for listed in dataset.get_fragments(filter=filter) if filter is not None else dataset.get_fragments():
        yield made(listed.path, dataset.filesystem, partition_expression=listed.partition_expression)


def _row_group_windows(fragment: ds.Fragment, rows: int) -> Iterator[ds.Fragment]:
    """``fragment`` as consecutive windows of its row groups, each of at most ``rows`` rows (a larger row group
    alone), sharing the footer it read once.

    A Parquet scan buffers every row group of its fragment ahead of the
    batches it gives (pyarrow's ``pre_buffer``, which joins their byte ranges
    into few reads). The driver's own data files hold 64 row groups of 1,024
    rows: scanned whole, reading a quiet night's ``files`` back held 20 to 60
    MB of anonymous memory at 100,000 files, 12 in windows of 4,096 rows, 7 in
    windows of one row group (:data:`WINDOW_ROWS`). On an object store a
    window is one joined read: a driver's data file costs 64 reads where it
    cost one or two (about one a thousand rows read back), a worker's file of
    one row group none more.
    """
    if not isinstance(fragment, ds.ParquetFileFragment):
        yield fragment
        return
    fragment.ensure_complete_metadata()
    groups = fragment.row_groups
    if len(groups) < 2:
        yield fragment
        return
    window: list[int] = []
    held = 0
    for group in groups:
        if window and held + group.num_rows > rows:
            yield fragment.subset(row_group_ids=window)
            window, held = [], 0
        window.append(group.id)
        held += group.num_rows
    yield fragment.subset(row_group_ids=window)


def _fragment_batches(
    fragment: ds.Fragment,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter: ds.Expression | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    given = 0
    try:
        batches = fragment.to_batches(schema=schema, columns=columns, filter=filter, batch_size=batch_rows, **STREAM)
        for batch in batches:
            given += 1
            yield batch
        return
    except pa.ArrowNotImplementedError:
        if given or filter is None:
            raise
    for batch in fragment.to_batches(schema=schema, batch_size=batch_rows, **STREAM):
        kept = pa.Table.from_batches([batch]).filter(filter)
        yield from (kept.select(list(columns)) if columns else kept).to_batches()


def _present(dataset: ds.Dataset, columns: Sequence[str] | None) -> list[str] | None:
    """The ``columns`` a table written before some of them were added has (:func:`conform` adds the rest as null)."""
    if not columns:
        return None
    names = set(dataset.schema.names)
    return [c for c in columns if c in names]


def conform(data: pa.Table, table: str, columns: Sequence[str] | None = None) -> pa.Table:
    """``data`` with ``table``'s schema types (deltalake may read strings as large strings), missing columns null."""
    schema = SCHEMAS[table]
    names = list(columns) if columns else schema.names
    arrays = []
    fields = []
    for name in names:
        field = schema.field(name)
        if name in data.column_names:
            arrays.append(data.column(name).cast(field.type))
        else:
            arrays.append(pa.nulls(data.num_rows, field.type))
        fields.append(field.with_nullable(True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
