"""Turning a :class:`FileAudit` into what a person or a program reads.

Text from the file (keys, names, templates) is untrusted: every control
character, escape sequence and bidirectional override is shown escaped, so
a file cannot drive the terminal that prints its report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from gguf_audit.audit import FileAudit
from gguf_audit.findings import Finding
from gguf_audit.format.model import KV, StringArray, Value, ValueType, json_scalar

__all__ = ["audit_to_json", "escape", "fmt_bytes", "render_text", "value_to_json"]

# C0 and C1 controls, DEL, and the Unicode format characters that reorder or
# hide text (bidi embeddings and isolates, zero-width marks, BOM).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def escape(text: str, limit: int | None = None) -> str:
    """``text`` with every unsafe character shown as an escape, cut to ``limit``."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return _UNSAFE.sub(_escape_char, text)


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def value_to_json(value: Value) -> Any:
    """A metadata value as JSON-safe data (non-finite floats as strings)."""
    if isinstance(value, StringArray):
        return value.to_list()
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return [json_scalar(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, list):
        return [value_to_json(v) for v in value]
    return json_scalar(value)


def _kv_json(kv: KV, full_arrays: bool) -> dict[str, Any]:
    is_array = kv.type is ValueType.ARRAY
    return {
        "type": kv.type_name,
        "value": value_to_json(kv.value) if (full_arrays or not is_array) else None,
        "length": kv.length,
    }


def audit_to_json(audit: FileAudit, *, full_arrays: bool = False, samples: bool = False) -> dict[str, Any]:
    """The ``inspect --json`` object; ``samples`` adds the sampled blocks' rows and fingerprint."""
    h = audit.header
    out: dict[str, Any] = {
        "url": audit.url,
        "size": audit.size,
        "version": h.version if h else None,
        "byte_order": h.byte_order if h else None,
        "alignment": h.alignment if h else None,
        "header_bytes": h.header_bytes if h else None,
        "data_offset": h.data_offset if h else None,
        "loadable": audit.loadable,
        "status": str(audit.status),
        "metadata": {kv.key: _kv_json(kv, full_arrays) for kv in h.metadata.values()} if h else {},
        "tensors": [
            {
                "name": t.name,
                "type": t.type_name,
                "type_id": t.type_id,
                "shape": list(t.shape),
                "offset": t.offset,
                "data_offset": t.data_offset,
                "n_bytes": t.n_bytes,
            }
            for t in (h.tensors if h else ())
        ],
        "problems": [f.as_dict() for f in audit.findings],
        "io": {"requests": audit.io.requests, "bytes_read": audit.io.bytes_read},
    }
    if samples:
        out["samples"] = [row.as_dict() for row in audit.samples]
        out["fingerprint"] = audit.fingerprint
    return out


def _summarise(kv: KV, width: int = 100) -> str:
    value = kv.value
    if kv.type is ValueType.ARRAY:
        n = kv.length or 0
        if isinstance(value, StringArray):
            head = [repr(escape(value[i], 24)) for i in range(min(n, 3))]
        elif isinstance(value, np.ndarray):
            head = [repr(json_scalar(v)) for v in value[:3].tolist()]
        elif isinstance(value, list):
            head = [f"array[{len(v) if isinstance(v, list | StringArray | np.ndarray) else '?'}]" for v in value[:3]]
        else:
            head = []
        more = ", …" if n > 3 else ""
        return f"[{', '.join(head)}{more}] ({n} items)"
    if isinstance(value, str):
        return repr(escape(value, width))
    return repr(json_scalar(value))


def fmt_bytes(n: int | None, *, exact: bool = False) -> str:
    """``1.6 MiB``; with ``exact``, ``1.6 MiB (1719840 B)``."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{n} B"
            return f"{size:.1f} {unit} ({n} B)" if exact else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _problem_lines(findings: Iterable[Finding]) -> list[str]:
    lines = []
    for f in findings:
        where = []
        if f.tensor:
            where.append(f"tensor {escape(f.tensor, 80)}")
        if f.offset is not None:
            where.append(f"@{f.offset}")
        suffix = f"  [{', '.join(where)}]" if where else ""
        lines.append(f"  {f.severity.upper():7} {f.code:32} {escape(f.message, 400)}{suffix}")
    return lines


def render_text(audit: FileAudit, *, max_tensors: int = 60, samples: bool = False) -> str:
    """A readable report of one file; ``samples`` adds per-tensor statistics of the sampled blocks."""
    h = audit.header
    lines = [f"{escape(audit.url)}"]
    verdict = {True: "yes", False: "NO", None: "unknown"}[audit.loadable]
    lines.append(f"  status {audit.status}, loadable by llama.cpp: {verdict}")
    lines.append(f"  size {fmt_bytes(audit.size, exact=True)}")
    if h is not None:
        arch = h.architecture
        lines.append(
            f"  GGUF v{h.version}, {h.byte_order}-endian, alignment {h.alignment}, "
            f"{h.n_kv} keys, {h.n_tensors} tensors" + (f", architecture {escape(arch, 40)}" if arch else "")
        )
        lines.append(f"  header {fmt_bytes(h.header_bytes, exact=True)}, data section at {h.data_offset}")
        lines.append("")
        lines.append("metadata:")
        key_width = min(max((len(kv.key) for kv in h.kvs), default=10), 44)
        for kv in h.kvs:
            lines.append(f"  {escape(kv.key, 60):{key_width}}  {kv.type_name:14} {_summarise(kv)}")
        if h.tensors:
            lines.append("")
            lines.append(f"tensors ({h.n_tensors}):")
            name_width = min(max(len(t.name) for t in h.tensors), 48)
            for t in h.tensors[:max_tensors]:
                shape = "x".join(str(d) for d in t.shape)
                lines.append(
                    f"  {escape(t.name, 64):{name_width}}  {t.type_name:8} {shape:>20}  "
                    f"@{t.data_offset:<14} {t.n_bytes:>14} B"
                )
            if h.n_tensors > max_tensors:
                lines.append(f"  … {h.n_tensors - max_tensors} more (use --json for all)")
    if samples:
        lines.extend(_sample_lines(audit, max_tensors))
    lines.append("")
    if audit.findings:
        lines.append(f"problems ({len(audit.findings)}):")
        lines.extend(_problem_lines(audit.findings))
    else:
        lines.append("problems: none")
    lines.append("")
    lines.append(
        f"io: {audit.io.requests} requests, {fmt_bytes(audit.io.bytes_read, exact=True)} read"
        + (f" ({audit.io.bytes_read / audit.size:.2%} of the file)" if audit.size else "")
        + f", {audit.seconds * 1000:.0f} ms"
    )
    return "\n".join(lines)


def _sample_lines(audit: FileAudit, max_tensors: int) -> list[str]:
    from gguf_audit.checks.data import tensor_stats

    stats = tensor_stats(audit.samples)
    blocks: dict[str, int] = {}
    types: dict[str, str] = {}
    for row in audit.samples:
        blocks[row.tensor] = blocks.get(row.tensor, 0) + 1
        types[row.tensor] = row.type
    lines = ["", f"samples ({len(audit.samples)} blocks of {len(stats)} tensors, fingerprint {audit.fingerprint}):"]
    if not stats:
        return lines
    width = min(max(len(name) for name in stats), 48)

    def g(x: float | None) -> str:
        return "-" if x is None else f"{x:.4g}"

    for name, s in list(stats.items())[:max_tensors]:
        lines.append(
            f"  {escape(name, 64):{width}}  {types[name]:8} {blocks[name]:>3} blocks  min {g(s.min)} max {g(s.max)} "
            f"mean {g(s.mean)} std {g(s.std)} nan {s.n_nan} inf {s.n_inf} zero {s.zero_fraction:.0%}"
        )
    if len(stats) > max_tensors:
        lines.append(f"  … {len(stats) - max_tensors} more (use --json for all)")
    return lines
