"""Driver memory and LIST requests of listing one S3 root of many keys, by code version.

Run as ``python benchmarks/bench_listing.py [--keys 10000,100000] [--per-folder 10] [--python PY,...]``.

Fills a bucket of moto's S3 (:class:`~gguf_audit.testing.s3.MotoS3Server`, in a
process of its own, so its objects never count in the driver's memory) with
``--keys`` tiny keys, one folder per model of ``--per-folder`` keys (GGUF
quantisations, a ``model.safetensors`` and a ``README.md``), put straight into
moto's backend. Then, for each interpreter of ``--python`` (a virtualenv with
another checkout of gguf-audit installed measures that code), a fresh driver
process runs :func:`~gguf_audit.pipelines.listing.discover` on ``s3://bench``
(the default ``*.gguf`` include) after a warm-up listing of a small bucket
(botocore's service model, the client, the imports), and prints its resident
memory before the listing (``base``), its peak (``ru_maxrss``), the growth per
key, the wall time, the requests the listing counted and those the server saw
on the bucket (LISTs and others). A listing must cost ``ceil(keys / 1000)``
LISTs and no other request.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from typing import IO, Any

from gguf_audit.testing.s3 import FAKE_AWS_ENV

SERVER = """
import json, sys
from gguf_audit.testing.s3 import MotoS3Server

keys, per_folder = int(sys.argv[1]), int(sys.argv[2])


def objects():
    for i in range(keys):
        folder, j = divmod(i, per_folder)
        last = min(per_folder, keys - folder * per_folder)
        name = "README.md" if j == last - 1 else "model.safetensors" if j == last - 2 else f"m-{folder:07d}-Q{j}.gguf"
        yield f"models/org-{folder:07d}/{name}", b"x" * (1 + i % 7)


with MotoS3Server() as moto:
    moto.make_bucket("warm")
    moto.put_many("warm", ((f"w/{i}.gguf", b"w") for i in range(20)))
    moto.make_bucket("bench")
    stored = moto.put_many("bench", objects())
    print(json.dumps({"endpoint": moto.endpoint_url, "stored": stored}), flush=True)
    for _ in sys.stdin:
        mine = [r for r in moto.requests if r.path == "/bench" or r.path.startswith(("/bench?", "/bench/"))]
        lists = sum(1 for r in mine if r.method == "GET" and ("list-type=2" in r.path or "versions" in r.path))
        print(json.dumps({"lists": lists, "other": len(mine) - lists}), flush=True)
        moto.reset_stats()
"""

DRIVER = """
import json, resource, sys, time
from gguf_audit.pipelines.listing import discover


def rss_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


options = {"s3": {"client_kwargs": {"endpoint_url": sys.argv[1], "region_name": "us-east-1"},
                  "config_kwargs": {"proxies": {}}}}
discover(["s3://warm"], storage_options=options)
base = rss_kb()
begun = time.perf_counter()
listing = discover(["s3://bench"], storage_options=options)
wall = time.perf_counter() - begun
print(json.dumps({
    "files": len(listing.files), "safetensors_dirs": len(listing.safetensors_dirs), "requests": listing.requests,
    "base_kb": base, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "after_kb": rss_kb(),
    "wall_s": wall,
}))
"""


def _line(stream: IO[str] | None) -> dict[str, Any]:
    if stream is None:
        raise RuntimeError("the moto server process has no pipe")
    line = stream.readline()
    if not line:
        raise RuntimeError("the moto server process ended early")
    result: dict[str, Any] = json.loads(line)
    return result


def _ask(server: subprocess.Popen[str]) -> dict[str, Any]:
    """The requests the server saw on the bench bucket since it was last asked."""
    if server.stdin is None:
        raise RuntimeError("the moto server process has no pipe")
    server.stdin.write("stats\n")
    server.stdin.flush()
    return _line(server.stdout)


def _row(label: str, keys: int, run: dict[str, Any], seen: dict[str, Any]) -> str:
    base, peak = run["base_kb"] / 1024, run["peak_kb"] / 1024
    per_key = (run["peak_kb"] - run["base_kb"]) * 1024 / keys
    return (
        f"| {label} | {keys:,} | {run['files']:,} | {seen['lists']} ({math.ceil(keys / 1000)}) | {seen['other']} "
        f"| {run['requests']} | {base:.0f} | {peak:.0f} | {peak - base:.1f} | {per_key:.0f} | {run['wall_s']:.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", default="10000,100000", help="bucket sizes, comma-separated")
    parser.add_argument("--per-folder", type=int, default=10, help="keys a model folder (3 or more)")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="driver interpreters, comma-separated, each as LABEL=PATH or PATH (default: this one)",
    )
    parser.add_argument("--json", help="also write the runs here")
    args = parser.parse_args(argv)
    if args.per_folder < 3:
        parser.error(f"--per-folder must be 3 or more. Got {args.per_folder!r}.")
    drivers = [p.split("=", 1) if "=" in p else [p, p] for p in args.python.split(",")]
    env = {**os.environ, **FAKE_AWS_ENV}
    print(f"load average {os.getloadavg()[0]:.2f}; {args.per_folder} keys a folder")
    print(
        "| code | keys | files | LISTs (ceil) | other requests | counted | base MB | peak MB | growth MB "
        "| bytes/key | wall s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs = []
    for keys in (int(k) for k in args.keys.split(",")):
        with subprocess.Popen(
            [sys.executable, "-c", SERVER, str(keys), str(args.per_folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        ) as server:
            try:
                endpoint = _line(server.stdout)["endpoint"]
                for label, python in drivers:
                    out = subprocess.run(
                        [python, "-c", DRIVER, endpoint], capture_output=True, text=True, env=env, check=True
                    )
                    run = json.loads(out.stdout.strip().splitlines()[-1])
                    seen = _ask(server)
                    print(_row(label, keys, run, seen), flush=True)
                    runs.append({"code": label, "keys": keys, **run, **seen})
            finally:
                if server.stdin is not None:
                    server.stdin.close()
                server.wait(timeout=60)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
