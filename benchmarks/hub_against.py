"""bench_hub.py's ``--against COMMIT``: our reads at an older commit, against the same local Hub, in the same run.

The commit is exported with ``git archive`` into a temporary folder and a child
process runs with that tree first on ``PYTHONPATH``: it audits every file once
(imports, sessions, the sandbox), then for each line on its stdin (``pooled`` or
``serial``) forgets its CDN URLs, audits every file (16 at once, or one after
another) and answers its wall time. The parent resets the servers' counts before
each line, so requests and bytes are the child's alone. Older trees take
``audit_file(url, size=..., ...)``; newer ones an ``AuditTarget``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["OldTree", "export"]

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import gguf_audit
from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.io.source import ReadConfig
from gguf_audit.plan import SampleConfig
try:
    from gguf_audit.audit import AuditTarget
except ImportError:
    AuditTarget = None
try:
    from gguf_audit.io.hub_source import CDN_URLS
except ImportError:
    CDN_URLS = None

endpoint, refs, scan = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
read = ReadConfig(initial_bytes=64 * 1024, backoff_s=0.01)
config = AuditConfig(read=read, samples=SampleConfig() if scan == "sampled" else None, templates=False)
options = {"endpoint": endpoint, "token": False}

def one(r):
    url = f"hf://{r['repo']}/{r['path']}"
    if AuditTarget is None:
        return audit_file(url, size=r["size"], storage_options=options, config=config, revision=r["sha"])
    return audit_file(AuditTarget(url, storage_options=options, size=r["size"], revision=r["sha"]), config=config)

def forget():
    if CDN_URLS is not None:
        for name in ("_urls", "_direct"):
            getattr(CDN_URLS, name, {}).clear()

for r in refs:
    one(r)
print(json.dumps({"module": gguf_audit.__file__}), flush=True)
for line in sys.stdin:
    forget()
    begun = time.perf_counter()
    if line.strip() == "pooled":
        with ThreadPoolExecutor(16) as pool:
            audits = list(pool.map(one, refs))
    else:
        audits = [one(r) for r in refs]
    wall = time.perf_counter() - begun
    needed = sum(a.header.header_bytes + sum(s.n_bytes for s in a.samples) for a in audits if a.header is not None)
    print(json.dumps({"wall_s": wall, "needed": needed}), flush=True)
"""


def export(commit: str, into: Path) -> Path:
    """``commit``'s tree under ``into`` (``git archive``)."""
    tree = into / f"tree-{commit}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


class OldTree:
    """A child auditing the Hub's files with an older tree's code; :meth:`run` times one pass."""

    def __init__(self, tree: Path, endpoint: str, refs: list[dict[str, Any]], scan: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, endpoint, json.dumps(refs), scan],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tree,
        )
        module = str(self._answer()["module"])
        if not module.startswith(str(tree)):
            self.close()
            raise SystemExit(f"the child imported {module}, not the tree under {tree}")

    def _answer(self) -> dict[str, Any]:
        if self.proc.stdout is None:
            raise RuntimeError("the child's pipes are closed")
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the child ended (status {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, mode: str) -> tuple[float, int]:
        """One pass, ``pooled`` or ``serial``: its wall seconds, and the bytes its audits needed (headers and
        sampled blocks: an older commit's plan may differ)."""
        if self.proc.stdin is None:
            raise RuntimeError("the child's pipes are closed")
        self.proc.stdin.write(mode + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return float(answer["wall_s"]), int(answer["needed"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
