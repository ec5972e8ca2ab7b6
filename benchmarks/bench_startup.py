"""Whole-process ``gguf-audit inspect --json`` of a 7B-like header over HTTP, against hf.js's ``gguf()``.

Both read the same generated file (a Llama-2-7B-like header, 32k vocabulary,
tensor data a sparse hole) from the loopback Range server, as separate
processes started in turn (A B A B ...), so start-up, imports and the reads are
all counted, as a user meets them. Per command: median wall seconds, median peak
RSS (the child's own ``ru_maxrss``), and the requests and bytes the server saw.

gguf-audit's bytecode is compiled first, as ``pip install`` does: where
``PYTHONDONTWRITEBYTECODE`` is set (it is on the machine the figures come
from) every run would otherwise compile its hundred modules again, 0.2 s that
an installed gguf-audit never spends.

hf.js is ``@huggingface/gguf`` run by Node.js: give its folder with ``--hfjs DIR``
(one holding ``node_modules/@huggingface/gguf``), or let the benchmark install it
with npm into ``~/.cache/gguf-audit-bench/hfjs`` on first use.

``--before PATH`` also measures the ``gguf-audit`` script beside that
interpreter (say a virtualenv holding an earlier commit) in the same rounds,
so a change is judged before and after in one run, against the same hf.js.

``--python PATH`` measures the ``gguf-audit`` script beside another interpreter,
for example a virtualenv made with ``pip install .`` as the README installs it
(an editable install imports its own finder at every start-up, 10 to 20 ms
that an installed gguf-audit never spends); without it, ``python -m gguf_audit``
of the interpreter running the benchmark.

    python benchmarks/bench_startup.py [--runs 9] [--spec 32k] [--python PATH] [--before PATH]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from headers import SPECS, write_model

import gguf_audit
from gguf_audit.testing.http import RangeHTTPServer

HFJS_SCRIPT = """
import { gguf } from "@huggingface/gguf";
const { metadata, tensorInfos } = await gguf(process.argv[2]);
process.stdout.write(JSON.stringify({ kv: Object.keys(metadata).length, tensors: tensorInfos.length }) + "\\n");
"""


def _hfjs_dir(given: str | None) -> Path:
    folder = Path(given) if given else Path.home() / ".cache" / "gguf-audit-bench" / "hfjs"
    if not (folder / "node_modules" / "@huggingface" / "gguf").is_dir():
        if shutil.which("npm") is None:
            raise SystemExit("bench_startup: npm is missing; give --hfjs DIR with node_modules/@huggingface/gguf")
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "init", "-y"], cwd=folder, check=True, capture_output=True)
        subprocess.run(["npm", "install", "--silent", "@huggingface/gguf"], cwd=folder, check=True)
    (folder / "inspect.mjs").write_text(HFJS_SCRIPT)
    return folder


def _run(argv: Sequence[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS in MB of one finished child."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        err = child.stderr.read().decode() if child.stderr else ""
        raise SystemExit(f"bench_startup: {argv[0]} failed: {err[-500:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--spec", default="32k", choices=sorted(SPECS))
    parser.add_argument("--hfjs", help="a folder holding node_modules/@huggingface/gguf")
    parser.add_argument("--python", help="run the gguf-audit script installed beside this interpreter")
    parser.add_argument("--before", help="also run the gguf-audit script beside this interpreter, as 'before'")
    args = parser.parse_args(argv)
    hfjs = _hfjs_dir(args.hfjs)
    if args.python:
        ours = [_script_beside(args.python)]
    else:
        compileall.compile_dir(Path(gguf_audit.__file__).parent, quiet=1)
        ours = [sys.executable, "-m", "gguf_audit"]
    with tempfile.TemporaryDirectory(prefix="gguf-audit-bench-") as tmp:
        model = write_model(SPECS[args.spec], Path(tmp))
        with RangeHTTPServer(root=tmp) as server:
            url = server.url_for(model.path.name)
            commands = {
                "gguf-audit inspect --json": ([*ours, "inspect", url, "--json"], None),
                "hf.js gguf()": (["node", "inspect.mjs", url], hfjs),
            }
            if args.before:
                commands[BEFORE] = ([_script_beside(args.before), "inspect", url, "--json"], None)
            figures: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in commands}
            for i in range(args.runs + 1):  # the first round warms caches and is not counted
                for name, (command, cwd) in commands.items():
                    server.reset_stats()
                    wall, peak = _run(command, cwd)
                    if i:
                        figures[name].append((wall, peak, len(server.requests), server.bytes_sent))
    print(f"{model.label} header: {model.header_bytes:,} bytes, {model.n_kv} keys, {model.n_tensors} tensors")
    print(f"{'command':28} {'wall s':>8} {'peak MB':>8} {'requests':>8} {'bytes':>12}")
    medians = {}
    for name, rows in figures.items():
        wall, peak = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        medians[name] = wall
        print(f"{name:28} {wall:8.3f} {peak:8.1f} {rows[-1][2]:8d} {rows[-1][3]:12,}")
    ours, theirs = medians["gguf-audit inspect --json"], medians["hf.js gguf()"]
    print(f"wall time, gguf-audit over hf.js: {ours / theirs:.2f}x (median of {args.runs} paired runs)")
    if args.before:
        print(f"wall time, gguf-audit before over hf.js: {medians[BEFORE] / theirs:.2f}x (same runs)")
    return 0


BEFORE = "gguf-audit (before)"


def _script_beside(python: str) -> str:
    script = Path(python).parent / "gguf-audit"
    if not script.is_file():
        raise SystemExit(f"bench_startup: no gguf-audit script beside {python}")
    return str(script)


if __name__ == "__main__":
    sys.exit(main())
