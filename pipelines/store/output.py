"""The output of a scan: its nine Delta tables, the preflight, committing a run, recovering a killed one.

Layout: ``OUT/<table>/`` is a Delta table (``_delta_log/`` and the data files
under ``run_id=<run>/``) for each of ``runs``, ``files``, ``models``,
``tensors``, ``metadata``, ``problems``, ``samples``; ``OUT/_pending/<run>.json``
exists only while a run commits.

A run becomes visible all at once (``docs/tables.md``, "What a night is"):

1. Workers write data files under the table paths; no table's log names them.
   A run killed or failed now leaves only unreferenced files (vacuum removes them).
2. The driver writes ``_pending/<run>.json``, then commits each table once
   (one atomic log entry each), ``runs`` last; the ``runs`` row records every
   table's version after its commit. A run is *committed* when its ``runs``
   row is in: readers take nights from ``runs``, and every table's rows of a
   night arrive in one log entry, so no reader sees part of a night.
3. The marker is removed. A driver killed between the first commit and the
   ``runs`` commit leaves its marker: the next scan (or ``gguf-audit tables --vacuum``)
   deletes that run's partitions from the tables it reached (a metadata-only
   Delta delete), so every table goes back to holding only committed nights.

One writer at a time: a scan or a vacuum first takes the output's lease
(:mod:`~gguf_audit.pipelines.store.lease`, :meth:`Output.acquire`) and holds it to
the end, so :meth:`Output.recover` only ever rolls back the runs of a writer
whose lease expired. A commit checks the lease before each table, and before
``runs`` that every table still holds the run's data files; when either fails
it records nothing (:class:`LeaseLost`, :class:`NightLost`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
from fsspec.core import url_to_fs

from gguf_audit.errors import GGUFAuditError
from gguf_audit.pipelines.store.delta import STORE_ERRORS, DeltaTables, Fence, conform, delta_storage_options, one_line
from gguf_audit.pipelines.store.lease import DEFAULT_EXPIRY_S, Lease, LeaseLost, acquire_lease
from gguf_audit.pipelines.store.parts import PartFile, is_local_fs
from gguf_audit.tables.schema import PARTITION_COLUMN, SCHEMA_VERSION, SCHEMAS, TABLE_NAMES

__all__ = [
    "COMMIT_ORDER",
    "DETAIL_TABLES",
    "PENDING_DIR",
    "NightLost",
    "Output",
    "OutputError",
    "Recovered",
    "new_run_id",
    "source_pairs",
]

log = logging.getLogger(__name__)

PENDING_DIR: Final = "_pending"
COMMIT_ORDER: Final = (*(t for t in TABLE_NAMES if t != "runs"), "runs")
"""``runs`` last: its row is what makes a run committed."""
SUPPORTED: Final = ("file", "local", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
"""Stores both fsspec (the workers' data files) and deltalake (the commits) reach alike."""


class OutputError(GGUFAuditError, OSError):
    """The output cannot be written (the preflight's verdict); nothing was audited."""


class NightLost(OutputError):
    """A run's rows vanished from a table before its ``runs`` commit (another writer rolled them back)."""


def new_run_id(now: datetime | None = None) -> str:
    """``20260101T020304123Z-1a2b3c4d``: sorts by start time (to the millisecond), unique by its random tail."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :meth:`Output.recover` did with a run whose commit was interrupted."""

    run_id: str
    action: str
    """``rolled back`` (its partitions deleted) or ``cleaned`` (it was committed; only its marker was left)."""


class Output:
    """The audit tables under one ``--out`` URL and the commit protocol (see the module docs)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        fs, path = url_to_fs(url, **{k: v for k, v in self.storage_options.items() if k != "delta"})
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = path.rstrip("/") or path
        self.local = is_local_fs(fs)
        self.protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.delta = DeltaTables(url, delta_storage_options(url, self.storage_options))
        self.lease: Lease | None = None
        """The lease this process holds on the output (:meth:`acquire`); commits check it."""

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    @property
    def fsspec_options(self) -> dict[str, Any]:
        """The options the workers open data files with."""
        return {k: v for k, v in self.storage_options.items() if k != "delta"}

    # -- preflight

    def preflight(self) -> None:
        """Check the output can take a run before anything is audited; raises OutputError saying why.

        The store must be one deltalake can commit to; a local path must be a
        directory (made if missing) that takes a file; an object store's bucket
        must exist (never created) and take an object. A table directory in
        the Parquet layout of an earlier gguf-audit (partitions of one
        ``part-00000.parquet`` and no Delta log) is refused, since vacuum
        would delete its files.
        """
        if self.protocol not in SUPPORTED:
            raise OutputError(
                f"--out must be a local path or an s3://, gs:// or az:// URL (deltalake cannot commit to "
                f"{self.protocol}://). Got {self.url!r}."
            )
        try:
            if self.local:
                self._preflight_local()
            else:
                self._preflight_bucket()
            # The probe goes through deltalake, the way the commit will write (its endpoint and HTTP settings),
            # not through fsspec, which may reach a store the commit cannot.
            name = f".gguf-audit-probe-{secrets.token_hex(6)}"
            try:
                self.delta.write_probe(name)
            finally:
                # Removed through fsspec, not deltalake's object store: deltalake 1.6.6's
                # DeltaStorageHandler.delete_dir/delete_file block holding the GIL (delta-rs #4402 is
                # the same for update_incremental), so against a server in this process (moto in the
                # tests) they never return.
                self.fs.invalidate_cache()
                if self.fs.exists(self.path(name)):
                    self.fs.rm(self.path(name), recursive=True)
        except OutputError:
            raise
        except STORE_ERRORS as exc:
            reason = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {one_line(str(exc))}"
            raise OutputError(f"cannot write to the output: {reason}. Got {self.url!r}.") from exc
        for table in TABLE_NAMES:
            base = self.path(table)
            if self.fs.exists(base) and not self.fs.exists(f"{base}/_delta_log") and self._old_layout(base):
                raise OutputError(
                    f"{table}/ under the output holds files but no Delta log (the Parquet layout of gguf-audit "
                    f"before Delta tables); scan into a new --out. Got {self.url!r}."
                )

    def _old_layout(self, base: str) -> bool:
        """Whether ``base`` holds the one-file partitions gguf-audit wrote before Delta (``part-00000.parquet``).

        A table without a log may also be one whose first night was killed before
        its commit: its data files have other names and are only vacuum's business.
        """
        return bool(self.fs.glob(f"{base}/{PARTITION_COLUMN}=*/part-00000.parquet"))

    def _preflight_local(self) -> None:
        path = self.root
        probe = path
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if probe and not os.path.isdir(probe):
            raise OutputError(f"cannot write to the output: {probe!r} is a file, not a directory. Got {self.url!r}.")
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise OutputError(f"cannot write to the output: {path!r} is not writable. Got {self.url!r}.")

    def _preflight_bucket(self) -> None:
        bucket = self.root.split("/", 1)[0]
        if not bucket:
            raise OutputError(f"--out names no bucket. Got {self.url!r}.")
        try:
            self.fs.info(bucket)  # not exists(): s3fs answers False for a store it cannot reach
        except FileNotFoundError:
            raise OutputError(
                f"the bucket {bucket!r} does not exist (gguf-audit never creates one). Got {self.url!r}."
            ) from None
        except PermissionError:
            pass  # may not look at the bucket, may still write: the probe says
        except Exception as exc:  # the client's own errors (botocore's are no OSError), said once
            raise OutputError(f"cannot reach the store of {self.url}: {one_line(str(exc))}") from exc

    # -- reading committed runs

    def committed_runs(self) -> pa.Table:
        """Every ``runs`` row, or an empty table."""
        return self.delta.read("runs")

    def last_committed_row(self) -> dict[str, Any] | None:
        """The ``runs`` row of the latest committed run of this schema version, or None."""
        best: dict[str, Any] | None = None
        for row in self.committed_runs().to_pylist():
            if row["schema_version"] != SCHEMA_VERSION or row["status"] != "committed":
                continue
            if best is None or (row["finished_at"], row["run_id"]) > (best["finished_at"], best["run_id"]):
                best = row
        return best

    def last_committed_run(self) -> str | None:
        row = self.last_committed_row()
        return None if row is None else str(row["run_id"])

    def read(
        self,
        table: str,
        run_ids: Sequence[str],
        *,
        urls: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        where: ds.Expression | None = None,
    ) -> pa.Table:
        """Rows of ``table`` in the partitions of ``run_ids`` (only those of ``urls`` when given)."""
        return self.delta.read(table, run_ids, columns=columns, filter=_with_urls(where, urls))

    def batches(
        self,
        table: str,
        run_ids: Sequence[str],
        *,
        urls: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        where: ds.Expression | None = None,
    ) -> Iterator[pa.Table]:
        """:meth:`read`'s rows a record batch at a time (the driver streams what grows with the collection)."""
        yield from self.delta.batches(table, run_ids, columns=columns, filter=_with_urls(where, urls))

    def read_pairs(
        self, table: str, pairs: Mapping[str, Sequence[str]], *, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Detail rows of the files named in ``pairs`` (source run -> urls read by it)."""
        parts = [self.read(table, [run], urls=urls, columns=columns) for run, urls in pairs.items() if urls]
        if not parts:
            return conform(SCHEMAS[table].empty_table(), table, columns)
        return pa.concat_tables(parts)

    # -- the writer's lease

    def acquire(self, purpose: str, *, wait_s: float = 0.0, expiry_s: float = DEFAULT_EXPIRY_S) -> Lease:
        """Take the output's lease for ``purpose`` (``scan <run>``, ``vacuum``), waiting up to ``wait_s``.

        Raises :class:`~gguf_audit.pipelines.store.lease.LeaseHeld` (one line naming
        the holder) when another writer's lease is live after ``wait_s``.
        Release it with :meth:`release` (or ``with``), which the caller owns.
        """
        self.lease = acquire_lease(
            self.fs, self.root, local=self.local, purpose=purpose, where=self.url, wait_s=wait_s, expiry_s=expiry_s
        )
        if self.lease.taken_over is not None:
            # The holder that lost the lease may be paused between its last check and a commit: change every
            # table's metadata so that a commit from its older snapshot fails delta-rs's conflict check.
            try:
                self.delta.fence_all(self.lease.state.generation)
            except BaseException:
                self.release()
                raise
        return self.lease

    def release(self) -> None:
        """Give the lease back, if held. Called while an error propagates (a ``finally``), a lease that cannot
        be given back for the same cause says so only in the debug log: the error is the night's one line."""
        if self.lease is not None:
            self.lease.release(failing=sys.exc_info()[0] is not None)
            self.lease = None

    def _fence(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def check_rows(self, run_id: str, parts: Mapping[str, Sequence[PartFile]]) -> None:
        """Raise :class:`NightLost` unless every table's current version still names ``run_id``'s data files."""
        gone: list[str] = []
        for table, files in parts.items():
            if not files or table == "runs":
                continue
            dt = self.delta.latest(table)
            present: set[str] = set()
            if dt is not None:
                uris = dt.file_uris(file_pruning_predicate=[(PARTITION_COLUMN, "=", run_id)])
                present = {"/".join(u.rstrip("/").rsplit("/", 2)[-2:]) for u in uris}
            missing = [p for p in files if p.path not in present]
            if missing:
                gone.append(f"{table} ({len(missing)} of {len(files)} data files)")
        if gone:
            raise NightLost(
                f"run {run_id}'s rows are gone from {', '.join(gone)} before its runs row was written "
                f"(another writer rolled them back); nothing was recorded"
            )

    # -- commit and recovery

    def _marker(self, run_id: str) -> str:
        return self.path(PENDING_DIR, f"{run_id}.json")

    def commit(
        self,
        run_id: str,
        parts: Mapping[str, Sequence[PartFile]],
        runs_part: Callable[[Mapping[str, int]], PartFile],
        *,
        on_committed: Callable[[str, int], None] | None = None,
    ) -> dict[str, int]:
        """Commit a run: each table once, in :data:`COMMIT_ORDER`, then ``runs``; the versions made.

        ``runs_part`` writes the ``runs`` data file once the other tables'
        versions are known (its row records them). ``on_committed(table,
        version)`` is told after each commit. A failure rolls back what was
        committed at once; a killed driver's commit is rolled back by the next
        :meth:`recover`. With a lease held (:meth:`acquire`), it is checked
        before each table's commit, and before ``runs`` every table must still
        hold the run's data files (:meth:`check_rows`): a writer that lost its
        lease, or whose rows another writer rolled back, records nothing.
        """
        self._fence()
        owner = self.lease.state.describe() if self.lease is not None else None
        marker = {"run_id": run_id, "at": datetime.now(UTC).isoformat(), "tables": list(COMMIT_ORDER), "by": owner}
        if self.local:
            self.fs.makedirs(self.path(PENDING_DIR), exist_ok=True)
        self.fs.pipe_file(self._marker(run_id), json.dumps(marker).encode())
        versions: dict[str, int] = {}
        try:
            for table in COMMIT_ORDER:
                if table == "runs":
                    continue
                versions[table] = self._commit_fenced(table, parts.get(table, ()), run_id)
                if on_committed is not None:
                    on_committed(table, versions[table])
            runs = runs_part(dict(versions))
            self._fence()
            self.check_rows(run_id, parts)
            versions["runs"] = self._commit_fenced("runs", [runs], run_id)
        except (LeaseLost, NightLost):
            # Another writer holds the output now: undo this run's own partitions, and should that fail,
            # leave the marker (written again: the other writer may have cleared it) for the next recover().
            with contextlib.suppress(OSError):
                self.fs.pipe_file(self._marker(run_id), json.dumps(marker).encode())
            try:
                self.roll_back(run_id)
            except Exception as exc:  # noqa: BLE001 - the marker stays; the original error is the one to tell
                log.warning("could not roll back run %s yet (the next scan or vacuum will): %s", run_id, exc)
            raise
        except BaseException:
            if "runs" not in versions:
                self.roll_back(run_id)
            raise
        if on_committed is not None:
            on_committed("runs", versions["runs"])
        self._clear_marker(run_id)
        return versions

    def _commit_fenced(self, table: str, parts: Sequence[PartFile], run_id: str) -> int:
        """One table's commit under the lease: checked after its snapshot is read, and a commit refused
        because another writer fenced the table (:meth:`acquire` on a takeover) reported as the lost lease."""
        try:
            fence = None if self.lease is None else Fence(self._fence, self.lease.state.generation)
            return self.delta.commit(table, parts, run_id, fence=fence)
        except STORE_ERRORS:
            self._fence()  # raises LeaseLost when the refusal was the fence
            raise

    def _clear_marker(self, run_id: str) -> None:
        try:
            self.fs.rm_file(self._marker(run_id))
        except FileNotFoundError:
            pass
        except OSError as exc:  # harmless: the next recover() clears it
            log.warning("could not remove the commit marker of run %s: %s", run_id, exc)

    def _committed(self, run_id: str) -> bool:
        runs = self.delta.read("runs", [run_id], columns=["run_id"])
        return int(runs.num_rows) > 0

    def roll_back(self, run_id: str) -> None:
        """Delete ``run_id``'s partitions from every table, unless its ``runs`` row is in (then it stays)."""
        if self._committed(run_id):
            self._clear_marker(run_id)
            return
        for table in COMMIT_ORDER:
            dt = self.delta.open(table)
            if dt is None:
                continue
            present = self.delta.read(table, [run_id], columns=[PARTITION_COLUMN])
            if present.num_rows:
                self.delta.delete_runs(table, [run_id])
        self._clear_marker(run_id)

    def pending(self) -> list[str]:
        """Runs whose commit began and was not seen to end."""
        base = self.path(PENDING_DIR)
        try:
            names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(base, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(n.removesuffix(".json") for n in names if n.endswith(".json"))

    def recover(self) -> list[Recovered]:
        """Settle interrupted commits: roll back runs without their ``runs`` row, clear the markers of the rest."""
        done = []
        for run_id in self.pending():
            committed = self._committed(run_id)
            self.roll_back(run_id)
            done.append(Recovered(run_id, "cleaned" if committed else "rolled back"))
        return done


def _with_urls(where: ds.Expression | None, urls: Sequence[str] | None) -> ds.Expression | None:
    """``where``, narrowed to the rows of ``urls`` when given."""
    if urls is None:
        return where
    member = ds.field("url").isin(pa.array(list(urls), pa.string()))
    return member if where is None else where & member


DETAIL_TABLES: Final = ("tensors", "metadata", "samples")
"""The tables of per-file detail rows, partitioned by the run that read the file (``source_run_id``)."""


def source_pairs(files: pa.Table) -> dict[str, list[str]]:
    """The files of some ``files`` rows by the run that read them (their detail rows' partition)."""
    pairs: dict[str, list[str]] = {}
    for url, source in zip(files.column("url").to_pylist(), files.column("source_run_id").to_pylist(), strict=True):
        pairs.setdefault(str(source), []).append(str(url))
    return pairs
