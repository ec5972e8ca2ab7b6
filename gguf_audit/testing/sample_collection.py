"""A small sample collection for ``gguf-audit scan``: what a nightly audit of a bucket meets.

The model is gguf-audit's tiny llama (``gguf_audit.testing.builder.tiny_llama_like``:
every key and tensor llama.cpp needs, in miniature), written with gguf-py's own
``GGUFWriter``, the writer ``convert_hf_to_gguf.py`` uses, and its shard sets
split by ``GGUFWriter`` itself (``split_max_tensors``), as
``convert_hf_to_gguf.py --split-max-tensors`` does. Then it is damaged the way
real collections are:

- valid single files (the same name in two folders: two models), with a chat template;
- a truncated download (the bytes stop in the middle of the tensor data);
- a corrupt header (a key's length overwritten with garbage);
- a sharded model missing its middle shard;
- a sharded model whose second shard says it is the first (``split.no`` 0);
- a complete, valid sharded model.

``python -m gguf_audit.testing.sample_collection DIR`` writes it under ``DIR`` (any fsspec URL).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import fsspec
import gguf
import numpy as np
from fsspec.core import url_to_fs
from gguf.quants import quantize

from gguf_audit.format.parser import parse_header
from gguf_audit.testing.builder import KV, Tensor, tensor_data_bytes, tiny_llama_like
from gguf_audit.testing.encoding import Array

__all__ = ["SAMPLE_FILES", "build_sample_collection", "sample_files"]

CHAT_TEMPLATE: Final = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""A Zephyr-style template: every turn closed by EOS, as the template checks want."""

SAMPLE_FILES: Final = (
    "tiny-llama-Q4_K_M.gguf",
    "mirror/tiny-llama-Q4_K_M.gguf",
    "downloads/tiny-llama-Q4_K_M.gguf",
    "corrupt/tiny-llama-Q4_K_M.gguf",
    "sharded/llama-split-00001-of-00003.gguf",
    "sharded/llama-split-00003-of-00003.gguf",
    "sharded/misnumbered-00001-of-00002.gguf",
    "sharded/misnumbered-00002-of-00002.gguf",
    "sharded/complete-00001-of-00002.gguf",
    "sharded/complete-00002-of-00002.gguf",
)
"""Every file :func:`sample_files` makes, relative to the collection root."""


def _value(kv: KV) -> tuple[Any, Any]:
    """A builder KV's value and array item type, as GGUFWriter takes them."""
    value = kv.value.items if isinstance(kv.value, Array) else kv.value
    sub_type = gguf.GGUFValueType(kv.item_type) if kv.item_type is not None else None
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        value = list(value)
    return value, sub_type


def _tensor_data(tensor: Tensor) -> np.ndarray[Any, Any]:
    """Random weights of the tensor's shape and type, as GGUFWriter takes raw data (rows of bytes).

    Seeded by the name, so every build writes the same bytes. Norms are near
    one, matrices small and centred, the way trained weights look: sampled
    blocks of a valid file then raise no data finding.
    """
    name = tensor.name if isinstance(tensor.name, str) else tensor.name.decode()
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dims = list(tensor.dims)
    rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    n_bytes = tensor_data_bytes(tensor)
    qtype = gguf.GGMLQuantizationType(tensor.ggml_type)
    values = rng.standard_normal((rows, dims[0])).astype(np.float32) * 0.02
    if len(dims) == 1:
        values += 1.0
    if qtype is gguf.GGMLQuantizationType.Q4_K:
        # gguf-py cannot quantize Q4_K: random quants under small, finite scales.
        blocks = rng.integers(0, 256, size=(n_bytes // 144, 144), dtype=np.uint8)
        blocks[:, 0:2] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
        blocks[:, 2:4] = np.frombuffer(np.float16(0.001).tobytes(), dtype=np.uint8)
        data = blocks.reshape(-1)
    else:
        data = quantize(values, qtype).view(np.uint8).reshape(-1)
    return data.reshape(rows, n_bytes // rows) if len(dims) > 1 else data


def _write(path: Path, *, name: str, split_max_tensors: int = 0) -> list[bytes]:
    """The tiny llama through GGUFWriter: one file, or a shard set when ``split_max_tensors`` is set."""
    kvs, tensors = tiny_llama_like()
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    for kv in kvs:
        key = kv.key if isinstance(kv.key, str) else kv.key.decode()
        if key == "general.architecture":
            continue  # GGUFWriter writes it first, itself
        value = name if key == "general.name" else kv.value
        val, sub_type = _value(KV(key, kv.vtype, value, kv.item_type))
        writer.add_key_value(key, val, gguf.GGUFValueType(kv.vtype), sub_type=sub_type)
    writer.add_chat_template(CHAT_TEMPLATE)
    for tensor in tensors:
        tensor_name = tensor.name if isinstance(tensor.name, str) else tensor.name.decode()
        writer.add_tensor(tensor_name, _tensor_data(tensor), raw_dtype=gguf.GGMLQuantizationType(tensor.ggml_type))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    paths = writer.format_shard_names(path)
    return [p.read_bytes() for p in paths]


def _set_split_no(data: bytes, split_no: int) -> bytes:
    """The file with its ``split.no`` (a uint16) changed in place."""
    header = parse_header(data, len(data))
    kv = header.metadata["split.no"]  # type: ignore[union-attr]
    # record: u64 key length, the key, u32 value type, then the value
    at = kv.offset + 8 + len(kv.key.encode()) + 4
    return data[:at] + split_no.to_bytes(2, "little") + data[at + 2 :]


def sample_files() -> dict[str, bytes]:
    """The sample collection as ``{relative path: bytes}`` (see the module docs)."""
    with tempfile.TemporaryDirectory(prefix="gguf-audit-sample-") as tmp_dir:
        tmp = Path(tmp_dir)
        [llama] = _write(tmp / "single.gguf", name="Tiny Llama")
        n_tensors = len(tiny_llama_like()[1])
        missing = _write(tmp / "llama-split.gguf", name="Tiny Llama", split_max_tensors=-(-n_tensors // 3))
        misnumbered = _write(tmp / "misnumbered.gguf", name="Tiny Llama", split_max_tensors=-(-n_tensors // 2))
        complete = _write(tmp / "complete.gguf", name="Tiny Llama", split_max_tensors=-(-n_tensors // 2))
    corrupt = bytearray(llama)
    # The first key's length (the u64 after magic, version and the two counts) becomes 2**63:
    # a header no reader can follow.
    corrupt[24:32] = (1 << 63).to_bytes(8, "little")
    return {
        "tiny-llama-Q4_K_M.gguf": llama,
        "mirror/tiny-llama-Q4_K_M.gguf": llama,
        "downloads/tiny-llama-Q4_K_M.gguf": llama[: len(llama) * 3 // 5],
        "corrupt/tiny-llama-Q4_K_M.gguf": bytes(corrupt),
        "sharded/llama-split-00001-of-00003.gguf": missing[0],
        "sharded/llama-split-00003-of-00003.gguf": missing[2],
        "sharded/misnumbered-00001-of-00002.gguf": misnumbered[0],
        "sharded/misnumbered-00002-of-00002.gguf": _set_split_no(misnumbered[1], 0),
        "sharded/complete-00001-of-00002.gguf": complete[0],
        "sharded/complete-00002-of-00002.gguf": complete[1],
    }


def build_sample_collection(
    dest: str, *, storage_options: Mapping[str, Any] | None = None, files: Mapping[str, bytes] | None = None
) -> list[str]:
    """Write the sample collection under ``dest`` (a path or fsspec URL); returns the URLs written."""
    fs: fsspec.AbstractFileSystem
    fs, root = url_to_fs(dest, **(storage_options or {}))
    root = root.rstrip("/")
    written = []
    for rel, data in (files or sample_files()).items():
        path = f"{root}/{rel}"
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, data)
        written.append(fs.unstrip_protocol(path))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gguf_audit.testing.sample_collection", description=__doc__.split("\n")[0]
    )
    parser.add_argument("dest", nargs="?", default="sample-collection", help="where to write it (path or fsspec URL)")
    args = parser.parse_args(argv)
    urls = build_sample_collection(args.dest)
    print(f"sample collection: {len(urls)} files under {args.dest}/")
    for rel in SAMPLE_FILES:
        print(f"  {rel}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
