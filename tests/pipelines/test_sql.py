"""``gguf-audit sql``: one night's views, right for carried rows; and the summary's query, offline as printed."""

from __future__ import annotations

import csv
import importlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import file_row
from synthetic_nights import commit_night, model_row

from gguf_audit.cli import main
from gguf_audit.pipelines.commands.sql import summary_lines
from gguf_audit.pipelines.nights.picture import picture_table
from gguf_audit.pipelines.nights.views import VIEW_NAMES
from gguf_audit.pipelines.store.output import Output

REPO = Path(__file__).resolve().parents[2]
FILES = ("a", "b", "c", "d", "e")
COUNTS = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in VIEW_NAMES)


@pytest.fixture(scope="module")
def sql_command(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sql`` as an installed command: until the venv is reinstalled from this pyproject, a dist-info on the
    path declares its entry point (in this process, and through PYTHONPATH for child processes)."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    extra: str | None = None
    if not any(ep.name == "sql" for ep in entry_points(group="gguf_audit.commands")):
        extra = str(tmp_path_factory.mktemp("entry-points"))
        info = Path(extra) / "gguf_audit_sql-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gguf-audit-sql\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text(
            "[gguf_audit.commands]\nsql = gguf_audit.pipelines.commands.sql:add_sql_parser\n"
        )
        sys.path.append(extra)
        importlib.invalidate_caches()
        paths.append(extra)
    yield os.pathsep.join(paths)
    if extra is not None:
        sys.path.remove(extra)


def _problem(url: str | None, model: str, run_id: str, i: int) -> dict[str, Any]:
    scope = "file" if url is not None else "model"
    return {
        "url": url, "model_id": model, "scope": scope, "code": f"test.p{i}", "severity": "warning",
        "message": f"problem {i}", "source_run_id": run_id,
    }  # fmt: skip


def _tensor(url: str, run_id: str, i: int) -> dict[str, Any]:
    return {
        "url": url, "model_id": f"m-{url}", "index": i, "name": f"t{i}", "type": "F32", "type_id": 0,
        "n_dims": 1, "source_run_id": run_id,
    }  # fmt: skip


def _files(sources: dict[str, str], run_id: str) -> list[dict[str, Any]]:
    return [file_row(u, s, model_id=f"m-{u}", reused=s != run_id) for u, s in sources.items()]


@pytest.fixture(scope="module")
def four_nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Output, list[str]]:
    """Four nights of five files: the first reads all, the second reads ``e`` again, the third nothing,
    the fourth nothing with ``c`` gone. Every file has three problems (``e`` two after its re-read) and
    model ``m-a`` one of its own, judged by the first night (its ``source_run_id`` null, as early nights
    wrote it); the problems' true counts are 16, 15, 15, 12, and rows with ``run_id`` the night 16, 2, 0, 0."""
    out = Output(str(tmp_path_factory.mktemp("four-nights") / "out"))
    out.preflight()
    r1, r2, r3, r4 = "20260101T000000000Z-00000001", "20260102T000000000Z-00000002", "r3", "r4"
    commit_night(
        out,
        r1,
        {
            "files": _files(dict.fromkeys(FILES, r1), r1),
            "models": [model_row("a", None), *(model_row(u, r1) for u in FILES[1:])],
            "problems": [_problem(u, f"m-{u}", r1, i) for u in FILES for i in range(3)]
            + [_problem(None, "m-a", r1, 9)],
            "tensors": [_tensor(u, r1, i) for u in FILES for i in range(2)],
            "compare": [
                {
                    "url": "b",
                    "model_id": "m-b",
                    "reference_url": "a",
                    "tensor": "t0",
                    "verdict": "ok",
                    "source_run_id": r1,
                }
            ],
        },
    )
    again = {**dict.fromkeys(FILES, r1), "e": r2}
    commit_night(
        out,
        r2,
        {
            "files": _files(again, r2),
            "models": [*(model_row(u, r1) for u in FILES[:-1]), model_row("e", r2)],
            "problems": [_problem("e", "m-e", r2, i) for i in range(2)],
            "tensors": [_tensor("e", r2, i) for i in range(2)],
        },
    )
    commit_night(
        out, r3, {"files": _files(again, r3), "models": [*(model_row(u, r1) for u in FILES[:-1]), model_row("e", r2)]}
    )
    kept = {u: s for u, s in again.items() if u != "c"}
    commit_night(out, r4, {"files": _files(kept, r4), "models": [model_row(u, s) for u, s in kept.items()]})
    return out, [r1, r2, r3, r4]


def _csv(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, str]]:
    assert main(["sql", *args, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_views_count_each_night_as_its_picture(
    sql_command: str, four_nights: tuple[Output, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, runs = four_nights
    problems, naive = [], []
    for night in runs:
        [counts] = _csv(capsys, out.url, COUNTS, "--run", night)
        # every view holds the rows of the night's picture, carried rows included
        assert {t: int(n) for t, n in counts.items()} == {t: picture_table(out, t, night).num_rows for t in VIEW_NAMES}
        problems.append(int(counts["problems"]))
        [row] = _csv(
            capsys, out.url, f"SELECT count(*) AS n FROM delta_scan('{out.url}/problems') WHERE run_id = '{night}'"
        )
        naive.append(int(row["n"]))
    assert problems == [16, 15, 15, 12]
    assert naive == [16, 2, 0, 0]  # the pattern the summary used to teach
    # Rows show as the picture has them: the night's run_id, the reading night's source_run_id.
    rows = _csv(capsys, out.url, "SELECT DISTINCT url, run_id, source_run_id FROM tensors ORDER BY url")
    assert [(r["url"], r["run_id"], r["source_run_id"]) for r in rows] == [
        *((u, runs[3], runs[0]) for u in ("a", "b", "d")),
        ("e", runs[3], runs[1]),
    ]
    # the default night is the latest; the compare row of m-b, judged by the first night, is still there
    [latest] = _csv(capsys, out.url, "SELECT (SELECT run_id FROM runs) AS night, (SELECT count(*) FROM compare) AS n")
    assert latest == {"night": runs[3], "n": "1"}


def test_the_printed_statements_count_right_for_every_night(four_nights: tuple[Output, list[str]]) -> None:
    import duckdb

    out, runs = four_nights
    for night, expected in zip(runs, (16, 15, 15, 12), strict=True):
        _, statements = summary_lines(out.url, night, {})
        assert not [s for s in statements if s.startswith("INSTALL")]
        con = duckdb.connect()
        try:
            for statement in statements[:-1]:
                con.execute(statement)
            [(n,)] = con.execute("SELECT count(*) FROM problems").fetchall()
            by_status = con.execute(statements[-1]).fetchall()
        finally:
            con.close()
        assert n == expected and sum(row[3] for row in by_status) == expected - 1  # less m-a's own problem


def test_formats_views_and_usage_errors(
    sql_command: str, four_nights: tuple[Output, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, runs = four_nights
    assert (
        main(["sql", out.url, "SELECT url, code FROM problems WHERE url = 'e' ORDER BY code", "--format", "jsonl"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [{"url": "e", "code": "test.p0"}, {"url": "e", "code": "test.p1"}]
    assert main(["sql", out.url, "SELECT 'a\x1b[31m' AS s, NULL AS n"]) == 0
    table = capsys.readouterr().out
    assert "\x1b" not in table and "NULL" in table and "(1 row)" in table and "cut" not in table
    long = "x" * 100
    assert main(["sql", out.url, f"SELECT '{long}' AS s, 'short' AS t UNION ALL SELECT 'a', '{long}'"]) == 0
    table = capsys.readouterr().out
    assert long not in table and "… (100 characters)" in table and "(2 rows)" in table
    assert "(2 values cut to 60 characters, each with its length; --full-values shows them whole)" in table
    assert main(["sql", out.url, f"SELECT '{long}' AS s", "--full-values"]) == 0
    table = capsys.readouterr().out
    assert long in table and "cut" not in table
    assert main(["sql", out.url, "--views", "--run", runs[1]]) == 0
    views = capsys.readouterr().out
    assert views.startswith(f"-- night {runs[1]}\n") and "LOAD '" in views and "INSTALL" not in views
    assert all(f"TEMP VIEW {t} AS" in views for t in VIEW_NAMES if t != "samples")
    for args, message in (
        ([out.url], "give a query"),
        ([out.url, "SELECT 1", "--run", "nope"], "no committed night 'nope'"),
        ([out.url, "SELECT nothing FROM files"], "nothing"),
        ([str(out.url) + "-missing", "SELECT 1"], "no committed night"),
    ):
        assert main(["sql", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gguf-audit: sql: ") and message in err and err.count("\n") == 1, err


@pytest.mark.slow
@pytest.mark.cluster
def test_the_summary_query_runs_offline_as_printed(
    sql_command: str, client: Any, local_collection: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real scan's summary: both printed forms, pasted as they are into processes without a network."""
    out = tmp_path / "out"
    scheduler = client.scheduler.address
    argv = ["scan", str(local_collection), "--out", str(out), "--scheduler", scheduler, "--no-progress"]
    assert main(argv) in (0, 1)
    printed = capsys.readouterr().out.splitlines()
    at = printed.index(next(line for line in printed if line.startswith("query this night (views ")))
    command = printed[at + 1].strip()
    assert printed[at + 2].startswith("or in DuckDB")
    statements = []
    for line in printed[at + 3 :]:
        if not line.startswith("  "):
            break
        statements.append(line.strip())
    assert statements[-1].startswith("SELECT") and "problems p" in statements[-1]
    no_network = ["unshare", "-rn"] if _can_unshare() else []
    env = {
        **os.environ,
        "PYTHONPATH": sql_command,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    shell = subprocess.run(
        [*no_network, "sh", "-c", command], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert shell.returncode == 0, shell.stderr
    script = "import duckdb, json, sys; print(json.dumps(duckdb.connect().execute(sys.stdin.read()).fetchall()))"
    run = [sys.executable, "-c", script]
    duck = subprocess.run(
        [*no_network, *run],
        input="\n".join(statements),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert duck.returncode == 0, duck.stderr
    # the same answer both ways, and the one the summary showed
    files = picture_table(Output(str(out)), "files").to_pylist()
    n_files = len(files)
    # the night's verdicts: loadable false exactly for refuses and aborts, and the build they describe
    assert {(f["loadable"], f["llama_cpp"]) for f in files} <= {(True, "loads"), (False, "refuses"), (False, "aborts")}
    assert {r["llama_cpp_build"] for r in picture_table(Output(str(out)), "runs").to_pylist()} == {"b11312"}
    models = picture_table(Output(str(out)), "models").to_pylist()
    assert {m["llama_cpp"] for m in models if m["loadable"] is False} <= {"refuses", "aborts"}
    assert n_files and sum(row[2] for row in json.loads(duck.stdout.splitlines()[-1])) == n_files
    assert f"({len([r for r in json.loads(duck.stdout.splitlines()[-1])])} rows)" in shell.stdout
    assert shlex.split(command)[:3] == ["gguf-audit", "sql", str(out)]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False).returncode == 0


def test_the_documented_polars_and_pandas_views_are_the_pictures(four_nights: tuple[Output, list[str]]) -> None:
    """docs/tables.md's polars and pandas recipes give every view of the latest night its picture's rows."""
    out, runs = four_nights
    docs = (REPO / "docs" / "tables.md").read_text()
    expected = {t: picture_table(out, t, runs[-1]).num_rows for t in VIEW_NAMES if t != "runs"}
    for marker in ("import polars", "import pandas"):
        [code] = [c for c in re.findall(r"```python\n(.*?)```", docs, re.S) if marker in c]
        scope: dict[str, Any] = {}
        exec(code.replace('"audit-out"', repr(out.url)), scope)  # the docs' own recipe
        frames = {t: scope[t] for t in expected}
        counts = {t: len(f.collect()) if hasattr(f, "collect") else len(f) for t, f in frames.items()}
        assert counts == expected, marker
        assert set(
            frames["tensors"]["run_id"] if marker == "import pandas" else frames["tensors"].collect()["run_id"]
        ) == {runs[-1]}
