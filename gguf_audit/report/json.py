"""The JSON reports: ``inspect --json``, ``sample --json`` and ``compare --json`` objects.

JSON-safe data only: non-finite floats follow
:func:`~gguf_audit.format.model.json_scalar` (``"NaN"``, ``"Infinity"``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from gguf_audit.audit import FileAudit
from gguf_audit.bounded import ITEM_LIMIT, VALUE_LIMIT, clip
from gguf_audit.checks.provenance import provenance_of
from gguf_audit.findings import LLAMA_CPP_BUILD
from gguf_audit.format.model import KV, Header, StringArray, Value, ValueType, json_scalar
from gguf_audit.redact import redact_value
from gguf_audit.report.format import UNSAFE

if TYPE_CHECKING:
    # Only named in annotations: a report of one file imports neither the comparison nor the sampled reads.
    from gguf_audit.compare import Comparison
    from gguf_audit.decode.sampled import DecodedBlock
    from gguf_audit.samples import FileSamples

__all__ = ["audit_to_json", "comparison_to_json", "dumps", "file_samples_to_json", "value_to_json"]


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # UTF-16 surrogate pair, as JSON spells astral characters
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def dumps(value: Any, **kwargs: Any) -> str:
    """JSON text that keeps readable Unicode but escapes every character the text report escapes.

    ``json.dumps(ensure_ascii=False)`` writes C1 controls (0x9B, the 8-bit CSI),
    bidi overrides, U+2028/2029 and tag characters raw: a file's strings could
    drive a terminal or reorder what a viewer shows. Outside strings JSON text
    holds ASCII only, so each such character is inside a string, where its
    ``\\uXXXX`` escape means the same character to every JSON reader.
    """
    return UNSAFE.sub(_json_escape, json.dumps(value, ensure_ascii=False, **kwargs))


def value_to_json(value: Value) -> Any:
    """A metadata value as JSON-safe data (non-finite floats as strings), long strings cut (their length stated)."""
    if isinstance(value, StringArray):
        return [clip(item, ITEM_LIMIT) for item in value.to_list()]
    if isinstance(value, str):
        return clip(redact_value(value), VALUE_LIMIT)
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


def _provenance_json(h: Header) -> dict[str, Any]:
    made = asdict(provenance_of(h))
    made["quantize_keys"] = list(made["quantize_keys"])
    return made


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
        "llama_cpp": None if audit.llama_cpp is None else str(audit.llama_cpp),
        "llama_cpp_build": LLAMA_CPP_BUILD,
        "status": str(audit.status),
        "metadata": {clip(kv.key): _kv_json(kv, full_arrays) for kv in h.metadata.values()} if h else {},
        "tensors": [
            {
                "name": clip(t.name),
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
        # What the file says of its making (a claim: `compare` proves or contradicts a derivation).
        "provenance": _provenance_json(h) if h else None,
    }
    if audit.upstream_url is not None:
        out["upstream_url"] = audit.upstream_url
    if samples:
        out["samples"] = [row.as_dict() for row in audit.samples]
        out["fingerprint"] = audit.fingerprint
        out["sampled_tensors"] = audit.sampled_tensors
        out["sampled_strata"] = audit.sampled_strata
    return out


def file_samples_to_json(samples: FileSamples) -> dict[str, Any]:
    """The ``sample --json`` object: every block's values and statistics, by tensor."""
    from gguf_audit.decode.stats import combine_stats

    by_tensor: dict[int, list[DecodedBlock]] = {}
    for d in samples.read.decoded:
        by_tensor.setdefault(d.block.tensor_index, []).append(d)
    out_tensors = []
    for index, decoded in sorted(by_tensor.items()):
        tensor = samples.header.tensors[index]
        parts = [d.stats for d in decoded if d.stats is not None]
        combined = combine_stats(parts)
        out_tensors.append(
            {
                "name": clip(tensor.name),
                "type": tensor.type_name,
                "shape": list(tensor.shape),
                "stats": combined.as_dict() if combined is not None else None,
                "blocks": [
                    {
                        "index": d.block.block_index,
                        "offset": d.block.offset,
                        "n_bytes": d.block.n_bytes,
                        "first_element": d.block.first_element,
                        "values": value_to_json(d.values) if d.values is not None else None,
                        "stats": d.stats.as_dict() if d.stats is not None else None,
                        "status": str(d.status),
                    }
                    for d in sorted(decoded, key=lambda d: d.block.block_index)
                ],
            }
        )
    return {
        "url": samples.url,
        "fingerprint": samples.read.fingerprint,
        "tensors": out_tensors,
        "problems": [f.as_dict() for f in samples.read.findings],
        "io": {
            "requests": samples.io.requests,
            "bytes_read": samples.io.bytes_read,
            "sampled_bytes": samples.read.plan.block_bytes,
            "fetched_ranges": len(samples.read.fetched),
        },
    }


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    """The ``compare --json`` object: the summary, a row per compared tensor, the skipped ones."""
    return {
        "quant": c.quant_url,
        "reference": c.reference_url,
        "reference_kind": c.reference_kind,
        "summary": c.summary(),
        "tensors": [t.as_dict() for t in c.tensors],
        "skipped": [{"name": clip(s.name), "reason": clip(s.reason, ITEM_LIMIT)} for s in c.skipped],
        "problems": [f.as_dict() for f in c.findings],
        "io": {
            "quant": {"requests": c.quant_io.requests, "bytes_read": c.quant_io.bytes_read},
            "reference": {"requests": c.reference_io.requests, "bytes_read": c.reference_io.bytes_read},
        },
    }
