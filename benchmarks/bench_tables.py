"""Table layouts compared on nightly churn: what a night adds to the output, and what its commit costs.

Run as ``python benchmarks/bench_tables.py [--files N] [--json OUT]`` (default 1,000 files).

Every file's rows are those of one real audit of a Llama-2-7B-like file
(``headers.py``: 291 tensors, a 32k vocabulary, the data a sparse hole),
sampled at the default budget, with the URL, the name and the sample
statistics made different per file so that files do not compress into one
another. Rows are written as the scan writes them: one Parquet data file per
table per batch of files (the scan's automatic batch size for 2 workers of 2
threads), zstd, committed with deltalake.

Four nights, as the issue describes them: a **full** night (every file read),
a **quiet** incremental night (nothing changed), a **churn** night (1% new
files, 0.1% rewritten, 0.1% truncated, 0.1% removed) and a second quiet one.
Two layouts:

- ``nights`` (what the scan does): per-night ``files`` and ``models`` rows for
  every listed file and model; ``tensors``, ``metadata``, ``samples`` and
  ``problems`` rows only for the files read, found through
  ``files.source_run_id``. Rows are only appended.
- ``current``: current-state tables without a run partition; a night deletes
  the rows of changed and removed files by predicate (``url IN (...)``:
  delta-rs rewrites every data file holding one of them) and appends the rows
  read; a past night is a time-travel version, so the files a rewrite replaces
  stay until they age out.

``--samples K`` keeps only K of a file's samples rows, for a smaller sampling
budget (the default budget of 1 MiB gives 1,746 rows per such file).

Printed per layout and night: bytes added to the output (new data and log
files, as the store would bill them), that as a share of the full night,
rows written per table (appended plus copied by rewrites), and the commit's
seconds (for ``current``, the deletes' rewrites are part of it).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

# Run as a script, benchmarks/ is sys.path[0]: the generator sits beside this file.
from headers import SPECS, write_model

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.pipelines.scan.reuse import reuse_rows
from gguf_audit.pipelines.store.delta import DeltaTables
from gguf_audit.pipelines.store.parts import RunParts
from gguf_audit.pipelines.work.batches import auto_batch_size
from gguf_audit.pipelines.work.execute import FILE_TABLES
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, AuditTables, audits_to_tables
from gguf_audit.tables.schema import stored_schema

DATA_TABLES: Final = ("files", "models", "tensors", "metadata", "problems", "samples")
NIGHTS: Final = ("full", "quiet", "churn", "quiet again")


# ------------------------------------------------------------------ rows


class Rows:
    """A file's rows, from one template audit with per-file URL, name and sample statistics."""

    def __init__(self, audit: FileAudit, samples: int | None = None) -> None:
        # The sparse hole reads as zeros: drop the data.* findings a real file would not have.
        audit = dataclasses.replace(audit, findings=[f for f in audit.findings if not f.code.startswith("data.")])
        listed = ListedFile(audit.url, audit.size, "etag")
        self.template = audits_to_tables([AuditedFile(audit, listed, audit.url)], run_id="r")
        if samples is not None:
            self.template = dataclasses.replace(self.template, samples=self.template.samples.slice(0, samples))
        self.n_samples = self.template.samples.num_rows

    def of(self, url: str, run_id: str, seed: int, *, truncated: bool = False) -> AuditTables:
        rng = np.random.default_rng(seed)

        def stamp(t: pa.Table) -> pa.Table:
            n = t.num_rows
            t = t.set_column(t.schema.get_field_index("url"), t.schema.field("url"), pa.array([url] * n, pa.string()))
            t = t.set_column(t.schema.get_field_index("model_id"), t.schema.field("model_id"), pa.array([url[:-5]] * n))
            i = t.schema.get_field_index("source_run_id")
            return t.set_column(i, t.schema.field(i), pa.array([run_id] * n, pa.string()))

        files = stamp(self.template.files)
        listed = listed_of(url)
        for column, value, type_ in (
            ("fingerprint", f"{rng.integers(1 << 62):016x}{rng.integers(1 << 62):016x}", pa.string()),
            ("etag", listed.etag, pa.string()),
            ("mtime", listed.mtime, files.schema.field("mtime").type),
        ):
            files = files.set_column(files.schema.get_field_index(column), column, pa.array([value], type_))
        samples = stamp(self.template.samples)
        for column in ("mean", "std", "min", "max", "max_abs"):
            values = rng.normal(0.0, 0.02, samples.num_rows)
            samples = samples.set_column(samples.schema.get_field_index(column), column, pa.array(values))
        metadata = stamp(self.template.metadata)
        names = metadata.column("key").to_pylist()
        values = metadata["value_text"].to_pylist()
        text = [f"model {seed}" if k == "general.name" else v for k, v in zip(names, values, strict=True)]
        metadata = metadata.set_column(metadata.schema.get_field_index("value_text"), "value_text", pa.array(text))
        problems = stamp(self.template.problems)
        if truncated:
            status = files.schema.get_field_index("status")
            files = files.set_column(status, files.schema.field(status), pa.array(["error"]))
        return AuditTables(files, problems, stamp(self.template.tensors), metadata, samples)


def listed_of(url: str) -> ListedFile:
    """What a listing says of ``url``: its own ETag and modification time, the same every night."""
    digest = hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()
    mtime = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=int(digest[:8], 16) % (300 * 86400))
    return ListedFile(url, 4_000_000_000 + int(digest[8:12], 16), f'"{digest}"', None, mtime)


def model_rows(files: pa.Table, run_id: str) -> pa.Table:
    """One models row per (single-file) model, judged by ``run_id``."""
    rows = [
        {
            "model_id": r["model_id"],
            "sharded": False,
            "shard_count": 1,
            "n_files": 1,
            "complete": True,
            "status": r["status"],
            "loadable": r["loadable"],
            "architecture": r["architecture"],
            "name": r["name"],
            "n_tensors": r["n_tensors"],
            "size": r["size"],
            "n_problems": 0,
            "codes": r["codes"],
            "urls": [r["url"]],
            "source_run_id": run_id,
        }
        for r in files.select(
            ["model_id", "status", "loadable", "architecture", "name", "n_tensors", "size", "codes", "url"]
        ).to_pylist()
    ]
    return pa.Table.from_pylist(rows, schema=stored_schema("models"))


# ------------------------------------------------------------------ the collection through four nights


@dataclasses.dataclass
class Night:
    name: str
    listed: list[str]
    read: list[str]
    truncated: set[str]
    removed: list[str]


def nights(n: int, seed: int = 9) -> list[Night]:
    rng = random.Random(seed)
    urls = [f"s3://mirror/models/m{i:06d}-Q4_K_M.gguf" for i in range(n)]
    full = Night("full", list(urls), list(urls), set(), [])
    quiet = Night("quiet", list(urls), [], set(), [])
    k = max(1, round(n * 0.001))
    picked = rng.sample(urls, 3 * k)
    rewritten, truncated, removed = picked[:k], picked[k : 2 * k], picked[2 * k :]
    new = [f"s3://mirror/models/new{i:06d}-Q4_K_M.gguf" for i in range(max(1, round(n * 0.01)))]
    listed = [u for u in urls if u not in set(removed)] + new
    churn = Night("churn", listed, new + rewritten + truncated, set(truncated), removed)
    return [full, quiet, churn, Night("quiet again", list(listed), [], set(), [])]


def _du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _batches(urls: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(urls), size):
        yield list(urls[start : start + size])


class NightsLayout:
    """The scan's layout: per-night files and models rows, detail rows of the files read."""

    name = "nights"

    def __init__(self, root: Path, rows: Rows, batch: int) -> None:
        self.root, self.rows, self.batch = root, rows, batch
        self.tables = DeltaTables(str(root))
        self.previous: str | None = None

    def night(self, i: int, night: Night) -> tuple[dict[str, int], float]:
        run_id = f"r{i}"
        parts = []
        written: dict[str, int] = dict.fromkeys(DATA_TABLES, 0)
        facts = []
        for b, urls in enumerate(_batches(night.read, self.batch)):
            writer = RunParts(str(self.root), {}, run_id, f"b{b}", FILE_TABLES)
            for url in urls:
                tables = self.rows.of(url, run_id, hash((url, i)) & 0xFFFF, truncated=url in night.truncated)
                for name, t in tables.per_file().items():
                    writer.write(name, t)
                facts.append(tables.files)
            parts.extend(writer.close())
        driver = RunParts(str(self.root), {}, run_id, "driver", ("files", "models"))
        read = set(night.read)
        if self.previous is not None:
            unchanged = {u: listed_of(u) for u in night.listed if u not in read}
            base = self.tables.read("files", [self.previous])
            kept = reuse_rows(base, unchanged)
            driver.write("files", kept)
            models = self.tables.read("models", [self.previous])
            carried = pa.array(sorted(u[:-5] for u in unchanged), pa.string())  # single-file models
            driver.write("models", models.filter(pc.is_in(models["model_id"], value_set=carried)))
        if facts:
            driver.write("models", model_rows(pa.concat_tables(facts), run_id))
        parts.extend(driver.close())
        for part in parts:
            written[part.table] += part.rows
        begun = time.perf_counter()
        for table in DATA_TABLES:
            self.tables.commit(table, [p for p in parts if p.table == table], run_id)
        self.previous = run_id
        return written, time.perf_counter() - begun


class CurrentLayout:
    """Current-state tables: changed rows replaced by predicate, the past by time travel."""

    name = "current"

    def __init__(self, root: Path, rows: Rows, batch: int) -> None:
        self.root, self.rows, self.batch = root, rows, batch

    def _uri(self, table: str) -> str:
        return str(self.root / table)

    def _schema(self, table: str) -> pa.Schema:
        return stored_schema(table)

    def night(self, i: int, night: Night) -> tuple[dict[str, int], float]:
        run_id = f"r{i}"
        files: dict[str, list[tuple[str, int, int]]] = {t: [] for t in DATA_TABLES}
        written: dict[str, int] = dict.fromkeys(DATA_TABLES, 0)
        for b, urls in enumerate(_batches(night.read, self.batch)):
            per: dict[str, list[pa.Table]] = {t: [] for t in DATA_TABLES}
            for url in urls:
                tables = self.rows.of(url, run_id, hash((url, i)) & 0xFFFF, truncated=url in night.truncated)
                for name, t in tables.per_file().items():
                    per[name].append(t)
                per["models"].append(model_rows(tables.files, run_id))
            for table, chunks in per.items():
                data = pa.concat_tables(chunks)
                if data.num_rows == 0:
                    continue
                rel = f"part-{run_id}-b{b}.parquet"
                (self.root / table).mkdir(parents=True, exist_ok=True)
                pq.write_table(data, self.root / table / rel, compression="zstd")
                files[table].append((rel, (self.root / table / rel).stat().st_size, data.num_rows))
                written[table] += data.num_rows
        begun = time.perf_counter()
        gone = sorted(set(night.read) | set(night.removed))
        for table in DATA_TABLES:
            adds = [AddAction(rel, size, {}, int(time.time() * 1000), True, f'{{"numRecords":{n}}}')
                    for rel, size, n in files[table]]  # fmt: skip
            if i == 0:
                create_table_with_add_actions(self._uri(table), Schema.from_arrow(self._schema(table)), adds,
                                              mode="append")  # fmt: skip
                continue
            dt = DeltaTable(self._uri(table))
            if gone:
                column = "model_id" if table == "models" else "url"
                values = [u[:-5] for u in gone] if table == "models" else gone
                listed = ", ".join(f"'{v}'" for v in values)
                metrics = dt.delete(f"{column} IN ({listed})")
                written[table] += int(metrics.get("num_copied_rows", 0))
            if adds:
                dt.create_write_transaction(adds, mode="append", schema=self._schema(table))
        return written, time.perf_counter() - begun


def run_layout(
    layout_type: Callable[..., Any], root: Path, rows: Rows, batch: int, plan: Sequence[Night]
) -> list[dict[str, Any]]:
    layout = layout_type(root, rows, batch)
    out = []
    for i, night in enumerate(plan):
        before = _du(root) if root.exists() else 0
        written, seconds = layout.night(i, night)
        out.append({"night": night.name, "bytes_added": _du(root) - before, "rows_written": written,
                    "commit_s": seconds})  # fmt: skip
    return out


def template_audit(directory: Path) -> FileAudit:
    generated = write_model(SPECS["32k"], directory)
    return audit_file(str(generated.path), config=AuditConfig(samples=SampleConfig()))


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def report(results: Mapping[str, list[dict[str, Any]]], n: int) -> str:
    lines = [f"{n} files; rows written per table: files/models/tensors/metadata/problems/samples", ""]
    lines.append("| layout | night | bytes added | of a full night | rows written | commit s |")
    lines.append("|---|---|---:|---:|---|---:|")
    for layout, nights_ in results.items():
        full = nights_[0]["bytes_added"]
        for r in nights_:
            rows = "/".join(str(r["rows_written"][t]) for t in DATA_TABLES)
            lines.append(f"| {layout} | {r['night']} | {_fmt_bytes(r['bytes_added'])} | "
                         f"{r['bytes_added'] / full:.2%} | {rows} | {r['commit_s']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument(
        "--samples", type=int, metavar="K", help="keep K samples rows per file (a smaller sampling budget)"
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-tables-"))
    try:
        rows = Rows(template_audit(work), args.samples)
        batch = auto_batch_size(args.files, 4, 64, 2)
        plan = nights(args.files)
        results = {
            layout.name: run_layout(layout, work / layout.name, rows, batch, plan)
            for layout in (NightsLayout, CurrentLayout)
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    t = rows.template
    print(
        f"per file: {t.tensors.num_rows} tensors, {t.metadata.num_rows} metadata, {rows.n_samples} samples, "
        f"{t.problems.num_rows} problems rows; batches of {batch} files"
    )
    print(report(results, args.files))
    if args.json:
        Path(args.json).write_text(json.dumps({"files": args.files, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
