"""A seeded, structure-aware mutation engine over real GGUF headers.

:func:`read_seed` walks a little-endian GGUF v2/v3 header on its own (it does
not use :mod:`gguf_audit.format`, so a parser bug cannot hide in both) into a
:class:`Seed`: the key-value records as raw payloads and the tensor-info
records as fields. :func:`mutants` draws, from one ``random.Random(seed)``, a
stream of :class:`Mutant` files: raw byte damage (flips, counts, lengths, type
words, truncation points) and structural edits re-serialized with
:func:`encode` (NUL bytes in keys and tensor names, inflated dims, ggml type
ids, alignments, duplicate keys and names, MiB-long names, metadata values
retyped, tensor offsets moved). The same seed always gives the same files.

A mutant's data section is never stored: :meth:`Mutant.write` writes the
header and extends the file sparsely to the size the header implies, so
thousands of model-sized mutants cost only their headers on disk.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

__all__ = ["KINDS", "Mutant", "RawKV", "RawTensor", "Seed", "encode", "mutants", "read_seed"]

_SCALAR_BYTES: Final = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _U32, _I32, _U64, _F32, _BOOL = 8, 9, 4, 5, 10, 6, 7

MiB: Final = 1 << 20

# Keys the checks (and llama.cpp's loader) read: retyping one must give the
# same verdict on both sides.
READ_KEYS: Final = (
    "general.architecture",
    "general.alignment",
    "general.file_type",
    "general.quantization_version",
    "llama.context_length",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.block_count",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.vocab_size",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
    "split.count",
    "split.no",
)


@dataclass(frozen=True, slots=True)
class RawKV:
    """One key-value record: the key's bytes, the type word and the value's bytes as written."""

    key: bytes
    vtype: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class RawTensor:
    """One tensor-info record's fields."""

    name: bytes
    dims: tuple[int, ...]
    type_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class Seed:
    """A real file's header, as records, and the size of its data section."""

    name: str
    version: int
    kvs: tuple[RawKV, ...]
    tensors: tuple[RawTensor, ...]
    data_bytes: int
    """Bytes from the data section's start to the end of the file."""
    file_bytes: int


@dataclass(frozen=True, slots=True)
class Span:
    """Where one field of an encoded header sits: ``[start, end)`` and what it is."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutated file: its header bytes and the size of the whole (sparse) file."""

    ident: str
    """``<seed>-<n>-<kind>``: unique in one stream, stable for a seed."""
    kind: str
    seed: str
    content: bytes
    size: int

    def write(self, folder: Path) -> Path:
        """Write the file into ``folder`` (header, then a sparse hole up to ``size``); returns its path."""
        path = folder / f"{self.ident}.gguf"
        with open(path, "wb") as f:
            f.write(self.content[: self.size])
            f.truncate(self.size)
        return path


class _Walk:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"seed header ends inside a field at {self.pos}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self) -> bytes:
        return self.take(self.u64())

    def value(self, vtype: int) -> None:
        if vtype == _STRING:
            self.string()
        elif vtype == _ARRAY:
            item, n = self.u32(), self.u64()
            if item in _SCALAR_BYTES:
                self.take(_SCALAR_BYTES[item] * n)
            else:
                for _ in range(n):
                    self.value(item)
        else:
            self.take(_SCALAR_BYTES[vtype])


def read_seed(path: Path) -> Seed:
    """The header of a well-formed little-endian GGUF v2/v3 file at ``path``, as a :class:`Seed`."""
    buf = path.read_bytes()
    w = _Walk(buf)
    if w.take(4) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    version = w.u32()
    if version not in (2, 3):
        raise ValueError(f"{path} is GGUF version {version}; seeds must be little-endian v2 or v3")
    n_tensors, n_kv = w.u64(), w.u64()
    kvs = []
    for _ in range(n_kv):
        key = w.string()
        vtype = w.u32()
        start = w.pos
        w.value(vtype)
        kvs.append(RawKV(key, vtype, buf[start : w.pos]))
    tensors = []
    for _ in range(n_tensors):
        name = w.string()
        n_dims = w.u32()
        dims = tuple(struct.unpack(f"<{n_dims}q", w.take(8 * n_dims)))
        type_id = struct.unpack("<i", w.take(4))[0]
        tensors.append(RawTensor(name, dims, type_id, w.u64()))
    alignment = _alignment(kvs)
    data_start = -(-w.pos // alignment) * alignment
    return Seed(path.name, version, tuple(kvs), tuple(tensors), max(len(buf) - data_start, 0), len(buf))


def _alignment(kvs: Sequence[RawKV]) -> int:
    for kv in kvs:
        if kv.key.split(b"\0")[0] == b"general.alignment" and kv.vtype == _U32:
            value = int(struct.unpack("<I", kv.payload)[0])
            if value and not value & (value - 1) and value <= MiB:
                return value
            return 32
    return 32


def encode(
    seed: Seed, kvs: Sequence[RawKV] | None = None, tensors: Sequence[RawTensor] | None = None
) -> tuple[bytes, list[Span], int]:
    """``seed``'s header with ``kvs`` and ``tensors`` in place of its own: the bytes, field spans, and file size.

    The size is the header padded to its alignment plus the seed's data section,
    so the listed size stays what an unmutated header would imply.
    """
    kvs = seed.kvs if kvs is None else kvs
    tensors = seed.tensors if tensors is None else tensors
    out = bytearray(b"GGUF")
    spans: list[Span] = []

    def put(kind: str, data: bytes) -> None:
        spans.append(Span(kind, len(out), len(out) + len(data)))
        out.extend(data)

    put("version", struct.pack("<I", seed.version))
    put("n_tensors", struct.pack("<Q", len(tensors)))
    put("n_kv", struct.pack("<Q", len(kvs)))
    for kv in kvs:
        put("key_len", struct.pack("<Q", len(kv.key)))
        put("key", kv.key)
        put("vtype", struct.pack("<I", kv.vtype))
        if kv.vtype == _STRING:
            put("str_len", kv.payload[:8])
            put("value", kv.payload[8:])
        elif kv.vtype == _ARRAY:
            put("array_type", kv.payload[:4])
            put("array_len", kv.payload[4:12])
            put("value", kv.payload[12:])
        else:
            put("value", kv.payload)
    for t in tensors:
        put("name_len", struct.pack("<Q", len(t.name)))
        put("name", t.name)
        put("n_dims", struct.pack("<I", len(t.dims)))
        for d in t.dims:
            put("dim", struct.pack("<q", d))
        put("ggml_type", struct.pack("<i", t.type_id))
        put("tensor_offset", struct.pack("<Q", t.offset))
    alignment = _alignment(kvs)
    size = -(-len(out) // alignment) * alignment + seed.data_bytes
    return bytes(out), spans, size


# --- the mutations ---------------------------------------------------------------

_Edit = Callable[[Seed, random.Random], tuple[bytes, int]]


def _flip(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """1 to 3 random bits flipped in structural fields (counts, lengths, type words, dims, offsets)."""
    content, spans, size = encode(seed)
    buf = bytearray(content)
    fields = [s for s in spans if s.kind not in ("key", "name", "value")]
    for _ in range(rng.randint(1, 3)):
        s = rng.choice(fields)
        pos = rng.randrange(s.start, s.end)
        buf[pos] ^= 1 << rng.randrange(8)
    return bytes(buf), size


def _flip_any(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A random byte anywhere in the header set to a random value."""
    content, _, size = encode(seed)
    buf = bytearray(content)
    pos = rng.randrange(8, len(buf))
    buf[pos] = rng.randrange(256)
    return bytes(buf), size


def _set_field(kind: str, values: Callable[[int, random.Random], int]) -> _Edit:
    """Rewrite one field of ``kind`` (a count, a length, a type word) with a new integer, same width."""

    def edit(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
        content, spans, size = encode(seed)
        s = rng.choice([s for s in spans if s.kind == kind])
        width = s.end - s.start
        old = int.from_bytes(content[s.start : s.end], "little")
        new = values(old, rng) % (1 << (8 * width))
        return content[: s.start] + new.to_bytes(width, "little") + content[s.end :], size

    return edit


def _inflated(old: int, rng: random.Random) -> int:
    return rng.choice(
        [
            old + 1,
            old - 1,
            old + rng.randint(2, 64),
            old * 2,
            old + 1024,
            1 << 31,
            (1 << 32) - 1,
            1 << 62,
            (1 << 64) - 1,
        ]
    )


def _nul_in_key(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A NUL written into a key: over one of its bytes, or before a suffix llama.cpp never sees."""
    kvs = list(seed.kvs)
    i = rng.randrange(len(kvs))
    key = kvs[i].key
    if rng.random() < 0.5 and len(key) > 1:
        j = rng.randrange(1, len(key))
        key = key[:j] + b"\0" + key[j + 1 :]
    else:
        key = key + b"\0" + rng.choice([b"x", b"zz", b"hidden", b"\0"])
    kvs[i] = replace(kvs[i], key=key)
    content, _, size = encode(seed, kvs)
    return content, size


def _nul_in_name(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A NUL written into a tensor name: over one of its bytes, or before a suffix."""
    tensors = list(seed.tensors)
    i = rng.randrange(len(tensors))
    name = tensors[i].name
    if rng.random() < 0.4 and len(name) > 1:
        j = rng.randrange(1, len(name))
        name = name[:j] + b"\0" + name[j + 1 :]
    else:
        name = name + b"\0" + rng.choice([b"zz", b"x" * 40, b"\0"])
    tensors[i] = replace(tensors[i], name=name)
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _nul_cases(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """The NUL cases of issue 18: a shadowing key placed first, NUL-equal duplicates."""
    kvs = list(seed.kvs)
    case = rng.randrange(4)
    if case == 0:
        kvs.insert(0, RawKV(b"general.alignment\0x", _STRING, _str(b"64")))
    elif case == 1:
        kvs.insert(0, RawKV(b"general.architecture\0x", _STRING, _str(b"llama")))
    elif case == 2:
        kvs += [RawKV(b"extra\0a", _U32, struct.pack("<I", 1)), RawKV(b"extra\0b", _U32, struct.pack("<I", 2))]
    else:
        kvs.insert(0, RawKV(b"tokenizer.chat_template\0x", _STRING, _str(b"{{ bos_token }}{{ messages }}")))
    content, _, size = encode(seed, kvs)
    return content, size


def _dims(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """One tensor's dims changed: zero, negative, inflated, overflowing, or a different count of them."""
    tensors = list(seed.tensors)
    i = rng.randrange(len(tensors))
    t = tensors[i]
    dims = list(t.dims)
    case = rng.randrange(6)
    if case == 0 and dims:
        j = rng.randrange(len(dims))
        dims[j] = rng.choice([0, -1, 1, dims[j] * 2, dims[j] + 1, 1 << 31, (1 << 62) - 1, (1 << 63) - 1])
    elif case == 1:
        dims = dims + [rng.choice([1, 2, 0])] * rng.randint(1, 3)
    elif case == 2:
        dims = []
    elif case == 3:
        dims = [rng.choice([0, 1 << 40, (1 << 62) - 1, 3]) for _ in range(rng.randint(1, 4))]
    elif case == 4:
        # The abort of issue 18: an I8 tensor of shape [2^62 - 1, 2].
        tensors[i] = replace(t, dims=((1 << 62) - 1, 2), type_id=24)
        content, _, size = encode(seed, tensors=tensors)
        return content, size
    else:
        dims = dims[:1]
    tensors[i] = replace(t, dims=tuple(dims))
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _ggml_type(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    tensors = list(seed.tensors)
    i = rng.randrange(len(tensors))
    tensors[i] = replace(tensors[i], type_id=rng.choice([-1, *range(0, 42), 1000, 1 << 30]))
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _offset(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    tensors = list(seed.tensors)
    i = rng.randrange(len(tensors))
    t = tensors[i]
    other = rng.choice(tensors).offset
    new = rng.choice([t.offset + 1, t.offset + 32, other, seed.data_bytes, seed.data_bytes + 32, 1 << 40, 0])
    tensors[i] = replace(t, offset=new)
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _alignment_edit(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """``general.alignment`` added or replaced: any value, any of several types."""
    kvs = [kv for kv in seed.kvs if kv.key != b"general.alignment"]
    value = rng.choice([0, 1, 2, 3, 8, 16, 31, 32, 48, 64, 4096, 1 << 31])
    vtype = rng.choice([_U32, _U32, _U32, _U64, _I32, _STRING, _F32])
    if vtype == _STRING:
        payload = _str(str(value).encode())
    elif vtype == _F32:
        payload = struct.pack("<f", value)
    elif vtype == _U64:
        payload = struct.pack("<Q", value)
    else:
        payload = struct.pack("<I", value)
    kvs.insert(rng.randrange(len(kvs) + 1), RawKV(b"general.alignment", vtype, payload))
    content, _, size = encode(seed, kvs)
    return content, size


def _duplicate(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A key written twice, or a tensor name given to a second tensor."""
    if rng.random() < 0.5:
        kvs = list(seed.kvs)
        kv = rng.choice(kvs)
        kvs.insert(rng.randrange(len(kvs) + 1), kv)
        content, _, size = encode(seed, kvs)
        return content, size
    tensors = list(seed.tensors)
    a, b = rng.sample(range(len(tensors)), 2)
    tensors[b] = replace(tensors[b], name=tensors[a].name)
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _long_name(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A tensor name or key at and past ggml's 64-byte name limit, up to MiB long."""
    length = rng.choice([63, 64, 65, 200, MiB, 2 * MiB])
    if rng.random() < 0.6:
        tensors = list(seed.tensors)
        i = rng.randrange(len(tensors))
        name = (tensors[i].name + b"." + b"n" * length)[:length]
        tensors[i] = replace(tensors[i], name=name)
        content, _, size = encode(seed, tensors=tensors)
        return content, size
    kvs = list(seed.kvs)
    kvs.insert(rng.randrange(len(kvs) + 1), RawKV(b"k" * length, _U32, struct.pack("<I", 7)))
    content, _, size = encode(seed, kvs)
    return content, size


def _retype(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A key the checks read stored with another GGUF type."""
    kvs = list(seed.kvs)
    present = [i for i, kv in enumerate(kvs) if kv.key.decode("utf-8", "replace") in READ_KEYS]
    i = rng.choice(present)
    vtype = rng.choice([0, 1, 2, 3, _U32, _I32, _F32, _BOOL, _STRING, _U64, 11, 12, _ARRAY])
    number = rng.choice([0, 1, 2, 32, 4096])
    if vtype == _STRING:
        payload = _str(str(number).encode())
    elif vtype == _ARRAY:
        payload = struct.pack("<IQ", _U32, 2) + struct.pack("<II", number, number)
    elif vtype in (_F32, 12):
        payload = struct.pack("<f" if vtype == _F32 else "<d", number)
    else:
        payload = (number % 256 if _SCALAR_BYTES[vtype] == 1 else number).to_bytes(_SCALAR_BYTES[vtype], "little")
    kvs[i] = replace(kvs[i], vtype=vtype, payload=payload)
    content, _, size = encode(seed, kvs)
    return content, size


def _truncate(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    content, spans, size = encode(seed)
    header = len(content)
    cut = rng.choice(
        [
            rng.randrange(0, header),
            rng.choice(spans).start,
            header,
            header + (-header % 32),
            rng.randrange(header, size),
            size - 1,
        ]
    )
    return content, cut


def _drop(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    """A key-value or tensor-info record removed (the counts rewritten to match)."""
    if rng.random() < 0.5:
        kvs = list(seed.kvs)
        kvs.pop(rng.randrange(len(kvs)))
        content, _, size = encode(seed, kvs)
        return content, size
    tensors = list(seed.tensors)
    tensors.pop(rng.randrange(len(tensors)))
    content, _, size = encode(seed, tensors=tensors)
    return content, size


def _str(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


KINDS: Final[dict[str, tuple[int, _Edit]]] = {
    # kind: (weight, edit). Weighted towards the header's structure.
    "flip": (14, _flip),
    "flip_any": (6, _flip_any),
    "count": (6, _set_field("n_kv", _inflated)),
    "tensor_count": (6, _set_field("n_tensors", _inflated)),
    "key_length": (5, _set_field("key_len", _inflated)),
    "name_length": (5, _set_field("name_len", _inflated)),
    "value_length": (4, _set_field("str_len", _inflated)),
    "array_length": (4, _set_field("array_len", _inflated)),
    "n_dims": (5, _set_field("n_dims", lambda old, rng: rng.choice([0, 1, 2, 3, 4, 5, 64, 1 << 20]))),
    "vtype": (5, _set_field("vtype", lambda old, rng: rng.choice([*range(0, 14), 1 << 16]))),
    "array_type": (3, _set_field("array_type", lambda old, rng: rng.choice([*range(0, 14), 99]))),
    "dims": (9, _dims),
    "ggml_type": (7, _ggml_type),
    "offset": (6, _offset),
    "alignment": (6, _alignment_edit),
    "duplicate": (6, _duplicate),
    "nul_key": (6, _nul_in_key),
    "nul_name": (6, _nul_in_name),
    "nul_cases": (4, _nul_cases),
    "long_name": (2, _long_name),
    "retype": (5, _retype),
    "truncate": (6, _truncate),
    "drop": (3, _drop),
}


def mutants(
    seeds: Sequence[Seed], count: int, *, seed: int = 0, kinds: Sequence[str] | None = None
) -> Iterator[Mutant]:
    """``count`` mutants of ``seeds``, drawn from ``random.Random(seed)``: the same stream every time."""
    rng = random.Random(seed)
    names = list(KINDS) if kinds is None else list(kinds)
    weights = [KINDS[k][0] for k in names]
    for n in range(count):
        kind = rng.choices(names, weights)[0]
        base = seeds[n % len(seeds)]
        content, size = KINDS[kind][1](base, random.Random(rng.getrandbits(64)))
        yield Mutant(f"{base.name.removesuffix('.gguf')}-{n:06d}-{kind}", kind, base.name, content, size)
