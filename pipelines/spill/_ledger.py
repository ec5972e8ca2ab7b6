"""The driver's per-file state on its own disk, so its memory does not grow with the collection.

A night's driver must know, for every listed file, whether it has rows yet,
the small facts row the workers returned and where its tensor infos lie.
Held as Python objects that costs about a kilobyte a file (a URL string in a
set, an Arrow row kept in the pickled frame it came in, a packed tensor table
in a dict); here it costs a page cache:

- :class:`UrlLedger`: the listed URLs, which have rows, and the packed tensor
  tables of the files read (what the compare phase looks up, a task's worth at a
  time), in a private SQLite database (an empty file name: SQLite deletes it when
  the connection closes), whose page cache is capped at :data:`LEDGER_CACHE_KIB`;
- :class:`TableSpill`: Arrow tables appended to an anonymous temporary file
  as IPC streams and read back one at a time.

Both stay on the driver: nothing here goes to a worker.
"""

from __future__ import annotations

import io
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from typing import IO, Final

import pyarrow as pa

__all__ = ["LEDGER_CACHE_KIB", "TableSpill", "UrlLedger"]

LEDGER_CACHE_KIB: Final = 1024
"""The ledger's page cache: what it may hold in memory whatever the number of files (SQLite spills the rest).
Its reads and writes come in URL order, so a larger cache bought no time."""
_CHUNK: Final = 500
"""URLs per statement (under SQLite's bound-parameter limit on every build)."""


def _chunks(values: list[str], size: int = _CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class UrlLedger:
    """The night's listed URLs and which of them have rows, on the driver's disk.

    Used by the driver's thread alone (results are taken one at a time).
    """

    def __init__(self, urls: Iterable[str]) -> None:
        self._db = sqlite3.connect("", check_same_thread=False)
        weakref.finalize(self, self._db.close)  # a ledger nobody closed still lets go of its file
        self._db.execute(f"PRAGMA cache_size = -{LEDGER_CACHE_KIB}")
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE urls (url TEXT PRIMARY KEY, seen INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID")
        self._db.execute("CREATE TABLE tables (url TEXT PRIMARY KEY, packed BLOB NOT NULL) WITHOUT ROWID")
        self._db.execute(
            "CREATE TABLE compare_io (url TEXT PRIMARY KEY, requests INTEGER NOT NULL, bytes INTEGER NOT NULL)"
            " WITHOUT ROWID"
        )
        self._compared = False
        self._db.executemany("INSERT OR IGNORE INTO urls (url) VALUES (?)", ((u,) for u in urls))
        self._expected = int(self._db.execute("SELECT count(*) FROM urls").fetchone()[0])
        self._seen = 0

    def __len__(self) -> int:
        """How many URLs were listed."""
        return self._expected

    @property
    def n_seen(self) -> int:
        """How many listed URLs have rows."""
        return self._seen

    def unseen(self, urls: Iterable[str]) -> list[str]:
        """Those of ``urls`` that were listed and have no rows yet, each once, in their order."""
        wanted = list(dict.fromkeys(urls))
        fresh: set[str] = set()
        for chunk in _chunks(wanted):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT url FROM urls WHERE seen = 0 AND url IN ({marks})", chunk)
            fresh.update(str(r[0]) for r in rows)
        return [u for u in wanted if u in fresh]

    def mark_seen(self, urls: Iterable[str]) -> None:
        """Say ``urls`` have rows (URLs not listed are ignored)."""
        for chunk in _chunks(list(dict.fromkeys(urls))):
            marks = ",".join("?" * len(chunk))
            cursor = self._db.execute(f"UPDATE urls SET seen = 1 WHERE seen = 0 AND url IN ({marks})", chunk)
            self._seen += max(0, cursor.rowcount)

    def put_tables(self, tables: Iterable[tuple[str, bytes]]) -> None:
        """Keep each ``(url, packed tensor table)`` (a later one for a URL replaces the earlier)."""
        self._db.executemany("INSERT OR REPLACE INTO tables (url, packed) VALUES (?, ?)", tables)

    def tables_of(self, urls: Iterable[str]) -> dict[str, bytes]:
        """The packed tensor tables kept of those of ``urls`` that have one."""
        found: dict[str, bytes] = {}
        for chunk in _chunks(list(dict.fromkeys(urls))):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT url, packed FROM tables WHERE url IN ({marks})", chunk)
            found.update((str(u), bytes(b)) for u, b in rows)
        return found

    def drop_tables(self) -> None:
        """Let go of the tensor tables kept (once the compare phase is done, or has nothing to compare)."""
        self._db.execute("DELETE FROM tables")

    def add_compare_io(self, io: Iterable[tuple[str, int, int]]) -> None:
        """Add ``(url, requests, bytes)`` the compare phase spent on a file to what it spent on it before."""
        rows = list(io)
        self._compared = self._compared or bool(rows)
        self._db.executemany(
            "INSERT INTO compare_io (url, requests, bytes) VALUES (?, ?, ?) ON CONFLICT (url)"
            " DO UPDATE SET requests = requests + excluded.requests, bytes = bytes + excluded.bytes",
            rows,
        )

    @property
    def compared(self) -> bool:
        """Whether the compare phase spent anything on any file."""
        return self._compared

    def compare_io_of(self, urls: Iterable[str]) -> dict[str, tuple[int, int]]:
        """``(requests, bytes)`` the compare phase spent on each of those of ``urls`` it read."""
        found: dict[str, tuple[int, int]] = {}
        for chunk in _chunks(list(dict.fromkeys(urls))):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT url, requests, bytes FROM compare_io WHERE url IN ({marks})", chunk)
            found.update((str(u), (int(r), int(b))) for u, r, b in rows)
        return found

    def seen_urls(self) -> set[str]:
        """Every URL with rows, as a set (one Python string each: for tests and small nights)."""
        return {str(r[0]) for r in self._db.execute("SELECT url FROM urls WHERE seen = 1")}

    def one_row_report(
        self, columns: Iterable[pa.ChunkedArray | pa.Array], shown: int = 3
    ) -> tuple[int, tuple[int, list[str]], tuple[int, list[str]], tuple[int, list[str]]]:
        """Count the ``url`` values of ``columns`` (a night's ``files`` rows) against the listing, on disk.

        Returns the number of values, then for the URLs found more than once,
        the listed URLs not found and the URLs found but not listed: how many,
        and the first ``shown`` of them in order. Values are taken a chunk at a
        time, so the check holds no Python string per row.
        """
        db = self._db
        db.execute("DROP TABLE IF EXISTS present")
        db.execute("CREATE TEMP TABLE present (url TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
        total = 0
        for column in columns:
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            for chunk in chunks:
                for start in range(0, len(chunk), 4096):
                    values = chunk.slice(start, 4096).to_pylist()
                    total += len(values)
                    db.executemany(
                        "INSERT INTO present (url, n) VALUES (?, 1) ON CONFLICT (url) DO UPDATE SET n = n + 1",
                        ((v,) for v in values),
                    )

        def report(where: str) -> tuple[int, list[str]]:
            count = int(db.execute(f"SELECT count(*) FROM ({where})").fetchone()[0])
            first = [str(r[0]) for r in db.execute(f"{where} ORDER BY 1 LIMIT ?", (shown,))]
            return count, first

        # each side looked up in the other's key (NOT IN would first copy one side into a b-tree in memory)
        duplicated = report("SELECT url FROM present WHERE n > 1")
        missing = report("SELECT url FROM urls u WHERE NOT EXISTS (SELECT 1 FROM present p WHERE p.url = u.url)")
        unexpected = report("SELECT url FROM present p WHERE NOT EXISTS (SELECT 1 FROM urls u WHERE u.url = p.url)")
        db.execute("DROP TABLE present")
        return total, duplicated, missing, unexpected

    def close(self) -> None:
        self._db.close()


class TableSpill:
    """Arrow tables kept on the driver's disk (an anonymous temporary file), read back one at a time.

    Appending writes the table as an IPC stream at the end of the file; the
    spill remembers where each one starts and ends (a pair per table, not per
    row). Iterating reads them back in order, one in memory at a time.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._spans: list[tuple[int, int]] = []
        self._rows = 0
        self.reads = 0
        """Tables read back so far (what a pass over the spill costs is counted in these)."""

    def append(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="gguf-audit-driver-")  # noqa: SIM115 - closed by close()
            weakref.finalize(self, self._file.close)  # a spill nobody closed still lets go of its file
        start = self._file.seek(0, io.SEEK_END)
        self._file.write(memoryview(data))
        self._spans.append((start, data.size))
        self._rows += table.num_rows

    def extend(self, tables: Iterable[pa.Table]) -> None:
        for table in tables:
            self.append(table)

    def __len__(self) -> int:
        """How many tables it holds."""
        return len(self._spans)

    @property
    def num_rows(self) -> int:
        return self._rows

    def __iter__(self) -> Iterator[pa.Table]:
        for start, size in list(self._spans):
            yield self._read(start, size)

    def table(self, index: int) -> pa.Table:
        """The ``index``-th table appended."""
        start, size = self._spans[index]
        return self._read(start, size)

    def _read(self, start: int, size: int) -> pa.Table:
        self.reads += 1
        if self._file is None:  # pragma: no cover - spans exist only once the file does
            raise ValueError("the spill holds no table")
        self._file.seek(start)
        data = self._file.read(size)
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._spans = []
        self._rows = 0
