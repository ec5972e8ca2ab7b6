"""moto's S3 in a process of its own, for ``bench_s3_cap.py``: its CPU is then its own, not the scanner's.

Reads one JSON command a line on stdin and answers one JSON line on stdout:
``{"objects": [[key, path], ...]}`` starts the server with a bucket ``bench``
holding each file at its key (answers ``endpoint_url``); ``{"latency_s": x}``
adds ``x`` seconds before each answer; ``{"reset": true}`` zeroes the request
and byte counts; ``{"stats": true}`` tells them; ``{"quit": true}`` ends it.
Every answer carries this process's CPU time so far (``cpu_s``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from gguf_audit.testing.s3 import FAKE_AWS_ENV, MotoS3Server


def main() -> int:
    os.environ.update(FAKE_AWS_ENV)
    server: MotoS3Server | None = None
    try:
        for line in sys.stdin:
            command = json.loads(line)
            answer: dict[str, object] = {}
            if "objects" in command:
                server = MotoS3Server()
                server.make_bucket("bench")
                data: dict[str, bytes] = {}
                for key, path in command["objects"]:
                    blob = data.setdefault(path, Path(path).read_bytes())
                    server.put_many("bench", [(key, blob)])
                answer["endpoint_url"] = server.endpoint_url
            if server is None:
                raise SystemExit("the first command must name the objects")
            if "latency_s" in command:
                server.latency_s = float(command["latency_s"])
            if command.get("reset"):
                server.reset_stats()
            if command.get("stats") or command.get("reset"):
                answer.update(requests=len(server.requests), bytes_sent=server.bytes_sent)
            answer["cpu_s"] = time.process_time()
            print(json.dumps(answer), flush=True)
            if command.get("quit"):
                break
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
