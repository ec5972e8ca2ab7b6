"""The text reports: ``inspect``'s (a file's audit), ``sample``'s and ``compare``'s.

Every piece of text from a file goes through :func:`~gguf_audit.report.format.escape`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from gguf_audit.audit import FileAudit
from gguf_audit.checks.provenance import provenance_of
from gguf_audit.decode.stats import tensor_stats
from gguf_audit.findings import LLAMA_CPP_BUILD, llama_cpp_label
from gguf_audit.format.model import KV, StringArray, ValueType, json_scalar
from gguf_audit.redact import redact_value
from gguf_audit.report.dump import float32_repr, parameter_count, parameter_label, scalar_repr, shard_hint
from gguf_audit.report.format import MEASURE_CODE_WIDTH, counted, escape, finding_line, fmt_bytes, fmt_stat

if TYPE_CHECKING:
    # Only named in annotations: a report of one file imports neither the comparison nor the sampled reads.
    from gguf_audit.compare import Comparison
    from gguf_audit.samples import FileSamples

__all__ = ["render_comparison", "render_file_samples", "render_text"]


def _summarise(kv: KV, width: int = 100) -> str:
    value = kv.value
    if kv.type is ValueType.ARRAY:
        n = kv.length or 0
        if isinstance(value, StringArray):
            head = [repr(escape(value[i], 24)) for i in range(min(n, 3))]
        elif isinstance(value, np.ndarray) and value.dtype == np.float32:
            head = [float32_repr(float(v)) for v in value[:3].tolist()]
        elif isinstance(value, np.ndarray):
            head = [repr(json_scalar(v)) for v in value[:3].tolist()]
        elif isinstance(value, list):
            head = [f"array[{len(v) if isinstance(v, list | StringArray | np.ndarray) else '?'}]" for v in value[:3]]
        else:
            head = []
        more = ", …" if n > 3 else ""
        return f"[{', '.join(head)}{more}] ({n} items)"
    if isinstance(value, str):
        return repr(escape(redact_value(value), width))
    shown = scalar_repr(kv)
    return shown if shown is not None else repr(json_scalar(value))


def render_text(audit: FileAudit, *, max_tensors: int = 60, max_keys: int = 200, samples: bool = False) -> str:
    """A readable report of one file; ``samples`` adds per-tensor statistics of the sampled blocks.

    The first ``max_keys`` keys and ``max_tensors`` tensors are listed (a header may hold a million)."""
    h = audit.header
    lines = [f"{escape(audit.url)}"]
    verdict = {True: "yes", False: "NO", None: "unknown"}[audit.loadable]
    lines.append(
        f"  status {audit.status}, loadable by llama.cpp: {verdict}; "
        f"llama.cpp {LLAMA_CPP_BUILD}: {llama_cpp_label(audit.llama_cpp)}"
    )
    lines.append(f"  size {fmt_bytes(audit.size, exact=True)}")
    if h is not None:
        arch = h.architecture
        lines.append(
            f"  GGUF v{h.version}, {h.byte_order}-endian, alignment {h.alignment}, "
            f"{counted(h.n_kv, 'key')}, {counted(h.n_tensors, 'tensor')}"
            + (f", architecture {escape(arch, 40)}" if arch else "")
        )
        lines.append(f"  header {fmt_bytes(h.header_bytes, exact=True)}, data section at {h.data_offset}")
        file_type = h.metadata.get("general.file_type")
        ftype = scalar_repr(file_type) if file_type is not None else None
        lines.append(
            f"  parameters {parameter_label(parameter_count(h))}"
            + (f", file type {ftype}" if ftype is not None else "")
        )
        made = provenance_of(h).phrases()
        if made:
            lines.append(f"  made: {escape('; '.join(made), 400)}")
    hint = shard_hint(audit.url, h)
    if hint is not None:
        lines.append(f"  hint: {escape(hint)}")
    if h is not None:
        lines.append("")
        lines.append("metadata:")
        key_width = min(max((len(kv.key) for kv in h.kvs[:max_keys]), default=10), 44)
        for kv in h.kvs[:max_keys]:
            lines.append(f"  {escape(kv.key, 60):{key_width}}  {kv.type_name:14} {_summarise(kv)}")
        if len(h.kvs) > max_keys:
            lines.append(f"  … {len(h.kvs) - max_keys:,} more keys (use --json for all)")
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
        lines.extend(finding_line(f) for f in audit.findings)
    else:
        lines.append("problems: none")
    lines.append("")
    if audit.upstream_url is not None:
        lines.append(f"upstream: {audit.upstream_url}")
    lines.append(
        f"io: {counted(audit.io.requests, 'request')}, {fmt_bytes(audit.io.bytes_read, exact=True)} read"
        + (f" ({audit.io.bytes_read / audit.size:.2%} of the file)" if audit.size else "")
        + f", {audit.seconds * 1000:.0f} ms"
    )
    return "\n".join(lines)


def _sample_lines(audit: FileAudit, max_tensors: int) -> list[str]:
    stats = tensor_stats(audit.samples)
    blocks: dict[str, int] = {}
    types: dict[str, str] = {}
    for row in audit.samples:
        blocks[row.tensor] = blocks.get(row.tensor, 0) + 1
        types[row.tensor] = row.type
    strata = f"{bin(audit.sampled_strata or 0).count('1')} of 16 strata"
    lines = [
        "",
        f"samples ({counted(len(audit.samples), 'block')} of {counted(len(stats), 'tensor')}, {strata}, "
        f"fingerprint {audit.fingerprint}):",
    ]
    if not stats:
        return lines
    width = min(max(len(name) for name in stats), 48)
    g = fmt_stat
    for name, s in list(stats.items())[:max_tensors]:
        lines.append(
            f"  {escape(name, 64):{width}}  {types[name]:8} {blocks[name]:>3} blocks  min {g(s.min)} max {g(s.max)} "
            f"mean {g(s.mean)} std {g(s.std)} nan {s.n_nan} inf {s.n_inf} zero {s.zero_fraction:.0%}"
        )
    if len(stats) > max_tensors:
        lines.append(f"  … {len(stats) - max_tensors} more (use --json for all)")
    return lines


def render_file_samples(samples: FileSamples, *, max_values: int = 8) -> str:
    """``sample``'s text report: per block its place, statistics and first values."""
    lines = [escape(samples.url)]
    current = -1
    for d in sorted(samples.read.decoded, key=lambda d: (d.block.tensor_index, d.block.block_index)):
        b = d.block
        if b.tensor_index != current:
            current = b.tensor_index
            tensor = samples.header.tensors[current]
            shape = "x".join(map(str, tensor.shape))
            lines.append(f"  {escape(tensor.name, 64)}  {tensor.type_name} {shape}")
        head = f"    block {b.block_index:<8} @{b.offset:<12} {b.n_bytes:>5} B"
        if d.values is None or d.stats is None:
            lines.append(f"{head}  {d.status}: {escape(d.note or '', 200)}")
            continue
        s = d.stats
        values = ", ".join(f"{v:.6g}" for v in d.values[:max_values].tolist())
        more = ", …" if d.values.size > max_values else ""
        lines.append(
            f"{head}  min {fmt_stat(s.min)} max {fmt_stat(s.max)} mean {fmt_stat(s.mean)} std {fmt_stat(s.std)} "
            f"nan {s.n_nan} inf {s.n_inf} zero {s.zero_fraction:.0%}  [{values}{more}]"
        )
    for f in samples.read.findings:
        lines.append(finding_line(f, code_width=MEASURE_CODE_WIDTH, place=False))
    lines.append(
        f"io: {counted(samples.io.requests, 'request')}, {samples.io.bytes_read} B read for "
        f"{samples.read.plan.block_bytes} B of sampled blocks in {counted(len(samples.read.fetched), 'range')}"
        + (f"; fingerprint {samples.read.fingerprint}" if samples.read.fingerprint else "")
    )
    return "\n".join(lines)


def _blocks_used(used: int, planned: int | None) -> str:
    """``13/16``: blocks measured of those planned (a read failed for the rest); ``16`` when all were."""
    return f"{used}/{planned}" if planned is not None and planned != used else str(used)


_DERIVATION_MEANS: Final = {
    "derived": "every compared block of a converted tensor is the reference's, re-quantized bit for bit",
    "contradicted": "a converted tensor's blocks are not the reference's re-quantized: another source or recipe",
    "unprovable": "no converted tensor could be re-made here (its type, or an importance matrix)",
}


def _derivation_basis(summary: dict[str, Any]) -> str:
    """What a ``derived`` verdict rests on: the blocks re-made of those read, in how many converted tensors."""
    if summary["derivation"] != "derived":
        return ""
    return (
        f": {summary['n_derived_blocks']} of the {summary['n_converted_blocks']} blocks read re-made bit for bit, "
        f"in {summary['n_derived_tensors']} of {summary['n_converted_tensors']} converted tensors; "
        "the blocks not read are not compared"
    )


def _derived_cell(derivation: str | None, derived: int, blocks: int) -> str:
    return "-" if derivation in (None, "unprovable") else f"{derived}/{blocks}"


def render_comparison(c: Comparison) -> str:
    """``compare``'s text report: a line per tensor, then the file's summary."""
    lines = [f"{escape(c.quant_url)}", f"  against {escape(c.reference_url)} ({c.reference_kind})"]
    if c.tensors:
        width = min(max(len(t.name) for t in c.tensors), 40)
        lines.append(
            f"  {'tensor':{width}}  {'type':8} {'rel RMSE':>9} {'RMSE':>10} {'max err':>10} "
            f"{'≥1 step':>8} {'flips':>7} {'steps':>6} {'blocks':>7} derived"
        )
        for t in c.tensors:
            flag = "  LAYOUT SUSPECT" if t.layout_suspect else ""
            lines.append(
                f"  {escape(t.name, 40):{width}}  {t.quant_type:8} {t.relative_rmse:>9.3g} {t.rmse:>10.3g} "
                f"{t.max_abs_error:>10.3g} {t.over_step_fraction:>8.1%} {t.sign_flip_fraction:>7.1%} "
                f"{t.rmse_steps:>6.2f} {_blocks_used(t.n_blocks, t.n_planned_blocks):>7} "
                f"{_derived_cell(t.derivation, t.n_derived_blocks, t.n_blocks)}{flag}"
            )
    for s in c.skipped:
        lines.append(f"  skipped {escape(s.name, 64)}: {escape(s.reason, 200)}")
    summary = c.summary()
    lines.append(
        f"summary: {counted(summary['n_compared'], 'tensor')} compared, {summary['n_skipped']} skipped, "
        f"{summary['n_layout_suspect']} layout suspect; relative RMSE {summary['relative_rmse']:.3g}"
        + (
            f" over {summary['n_blocks']} of {summary['n_planned_blocks']} planned blocks"
            if summary["n_blocks"] != summary["n_planned_blocks"]
            else ""
        )
        + (
            f", worst {escape(str(summary['worst_tensor']), 64)} ({summary['worst_relative_rmse']:.3g})"
            if summary["worst_tensor"]
            else ""
        )
    )
    lines.append(f"derivation: {c.derivation} ({_DERIVATION_MEANS[str(c.derivation)]}){_derivation_basis(summary)}")
    for f in c.findings:
        lines.append(finding_line(f, code_width=MEASURE_CODE_WIDTH, place=False))
    lines.append(
        f"io: quant {counted(c.quant_io.requests, 'request')}, {c.quant_io.bytes_read} B; "
        f"reference {counted(c.reference_io.requests, 'request')}, {c.reference_io.bytes_read} B"
    )
    return "\n".join(lines)
