"""``gguf-audit demo``: build a small sample collection and audit every file in it.

The collection holds what a nightly audit meets: valid files, an interrupted
download, a corrupt header and a big-endian conversion.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gguf_audit.audit import audit_file
from gguf_audit.testing.builder import build_gguf, tiny_llama_like

__all__ = ["build_sample_collection", "run_demo"]


def build_sample_collection(root: Path) -> list[Path]:
    """Write the sample files under ``root`` and return their paths."""
    root.mkdir(parents=True, exist_ok=True)
    kvs, tensors = tiny_llama_like()
    valid = build_gguf(kvs, tensors)
    files = {
        "tiny-llama-Q4_K_M.gguf": valid,
        "tiny-llama-v2-Q4_K_M.gguf": build_gguf(kvs, tensors, version=2),
        "downloads/tiny-llama-Q4_K_M.gguf.partial.gguf": valid[: len(valid) * 2 // 3],
        "corrupt/tiny-llama-Q4_K_M.gguf": valid[:64] + b"\xff" * 64 + valid[128:],
        "bigendian/tiny-llama-Q4_K_M-BE.gguf": build_gguf(kvs, tensors, big_endian=True),
    }
    paths = []
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        paths.append(path)
    return paths


def run_demo(directory: str) -> int:
    root = Path(directory)
    paths = build_sample_collection(root)
    print(f"sample collection: {len(paths)} files under {root}/")
    statuses: Counter[str] = Counter()
    for path in paths:
        audit = audit_file(str(path))
        statuses[str(audit.status)] += 1
        verdict = {True: "loadable", False: "REFUSED", None: "unknown"}[audit.loadable]
        codes = ", ".join(sorted({f.code for f in audit.findings})) or "-"
        print(f"  {audit.status:10} {verdict:9} {str(path.relative_to(root)):48} {codes}")
    print("files by status: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print(f"details of one file: gguf-audit inspect {paths[2]}")
    # The demo succeeds when it ran: the planted problems are its point.
    return 0
