"""A file of many costly named chat templates: the per-file template budget bounds its audit.

Run as ``python benchmarks/bench_templates.py [--templates 150] [--bound-s 60]``.
Writes one GGUF file whose ``tokenizer.chat_template.<name>`` keys each hold a
distinct template that burns CPU until the render child's limit stops it (the
issue 12 measurement: about 2 s each, so 150 of them cost 300 s before the
budget), audits it with ``audit_file`` (a fresh template cache, default
limits), prints the wall time, the findings by code and the
``template.too_many`` message, and exits 1 unless that finding is there and the
audit ended within ``--bound-s``. Also times a file with the same number of
cheap templates, for scale. It touches nothing outside a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from gguf_audit.audit import AuditConfig, AuditResources, audit_file
from gguf_audit.codes import Code
from gguf_audit.templates.audit import TemplateCache
from gguf_audit.templates.limits import DEFAULT_LIMITS
from gguf_audit.testing.builder import build_gguf, kv_str

#: Nested loops that never finish: each render runs until the CPU or wall limit.
COSTLY = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{# N #}"
CHEAP = "{% for m in messages %}{{ m.content }}{% endfor %}{# N #}"


def _file(directory: Path, name: str, body: str, count: int) -> Path:
    kvs = [kv_str("general.architecture", "llama")]
    kvs += [kv_str(f"tokenizer.chat_template.t{i}", body.replace("N", str(i))) for i in range(count)]
    path = directory / name
    path.write_bytes(build_gguf(kvs))
    return path


def _audit(path: Path) -> tuple[float, Counter[str], str]:
    begun = time.monotonic()
    audit = audit_file(
        str(path), config=AuditConfig(semantics=False), resources=AuditResources(template_cache=TemplateCache())
    )
    elapsed = time.monotonic() - begun
    codes = Counter(f.code for f in audit.findings)
    too_many = next((f.message for f in audit.findings if f.code == Code.TEMPLATE_TOO_MANY), "")
    return elapsed, codes, too_many


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--templates", type=int, default=150)
    parser.add_argument("--bound-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    limits = DEFAULT_LIMITS
    print(
        f"limits: {limits.cpu_seconds:g} s CPU and {limits.wall_seconds:g} s wall per template, "
        f"{limits.max_templates} judged, {limits.max_renders} rendered, {limits.file_seconds:g} s per file"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ok = True
        for label, body in (("costly", COSTLY), ("cheap", CHEAP)):
            path = _file(Path(tmp), f"{label}.gguf", body, args.templates)
            elapsed, codes, too_many = _audit(path)
            print(f"{label}: {args.templates} templates, {path.stat().st_size} bytes, audited in {elapsed:.1f} s")
            print(f"  findings: {dict(sorted(codes.items()))}")
            print(f"  {Code.TEMPLATE_TOO_MANY}: {too_many or '(none)'}")
            ok = ok and bool(too_many) and elapsed <= args.bound_s
        print("within the budget" if ok else f"NOT within the budget of {args.bound_s:g} s")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
