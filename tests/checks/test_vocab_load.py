"""What llama_vocab::load (b11312) refuses or aborts on beyond the names, each verdict the oracle's.

Every case is a small vocabulary-only file; the oracle is
asked about all of them in one call (``--vocab-only``). A case passes when
gguf-audit reports the expected code (or nothing from the vocabulary checks) and
the file's verdict, the worst of its findings, is the one llama.cpp gives. A seeded
sweep of 200 random vocabularies checks the verdict the same way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from gguf_audit.checks.header import check_semantics
from gguf_audit.checks.vocab import _first_duplicate
from gguf_audit.codes import CODES, LlamaCpp
from gguf_audit.findings import Finding, llama_cpp_verdict
from gguf_audit.format.model import Header, StringArray, ValueType
from gguf_audit.format.parser import parse_header
from gguf_audit.llama import llama_tables
from gguf_audit.testing.builder import KV, build_gguf, kv_array, kv_i32, kv_str, kv_u32
from gguf_audit.testing.oracle import Oracle, Stage, find_oracle

_ORACLE_VERDICT = {"loaded": LlamaCpp.LOADS, "refused": LlamaCpp.REFUSES, "aborted": LlamaCpp.ABORTS}
_BASE = ["<unk>", "<s>", "</s>", "a", "b", "ab"]
_BASE_TYPES = [2, 3, 3, 1, 1, 1]
BYTE = 6
_SUPPRESS = "tokenizer.ggml.suppress_tokens"
_CHARSMAP = "tokenizer.ggml.precompiled_charsmap"
_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _vocab(
    model: str,
    tokens: Sequence[str] = (),
    types: Sequence[int] = (),
    extra: Sequence[KV] = (),
    *,
    arch: str = "llama",
    pre: str | None = "default",
    merges: bool = True,
) -> bytes:
    """A vocabulary of ``model``: the base tokens, then ``tokens`` of ``types``, then ``extra`` keys."""
    all_tokens = [*_BASE, *tokens]
    kvs = [
        kv_str("general.architecture", arch),
        kv_str("general.type", "vocab"),
        kv_str("tokenizer.ggml.model", model),
        *([kv_str("tokenizer.ggml.pre", pre)] if pre is not None else []),
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, all_tokens),
        kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, [0.0] * len(all_tokens)),
        kv_array("tokenizer.ggml.token_type", ValueType.INT32, [*_BASE_TYPES, *types]),
        *([kv_array("tokenizer.ggml.merges", ValueType.STRING, ["a b"])] if merges else []),
        kv_u32("tokenizer.ggml.bos_token_id", 1),
        kv_u32("tokenizer.ggml.eos_token_id", 2),
    ]
    return build_gguf([*kvs, *extra], [])


# name: (the file, the code expected, or None for a file whose vocabulary must raise nothing)
CASES: dict[str, tuple[bytes, str | None]] = {
    # What the 2026 converters write (conversion/gemma.py, base.py's get_vocab_base_pre): no finding, loads.
    "Gemma 4": (_vocab("gemma4", _BYTES, [BYTE] * 256, arch="gemma4", pre=None), None),
    "Gemma 4, pre gemma4": (_vocab("gemma4", _BYTES, [BYTE] * 256, arch="gemma4", pre="gemma4"), None),
    "Qwen 3.5": (_vocab("gpt2", arch="qwen35", pre="qwen35"), None),
    "Qwen 3.5 MoE": (_vocab("gpt2", arch="qwen35moe", pre="qwen35"), None),
    "GLM 5": (_vocab("gpt2", arch="glm-dsa", pre="glm5"), None),
    "GLM 5 Next": (_vocab("gpt2", arch="glm5-next", pre="glm5"), None),
    "Gemma 4 without merges": (_vocab("gemma4", arch="gemma4", pre=None, merges=False), "meta.missing_key"),
    "bert with a BYTE token": (_vocab("bert", ["<0x41>"], [BYTE]), "tokenizer.wpm_byte_token"),
    "bert without": (_vocab("bert"), None),
    **{
        f"{model} with a 1-byte BYTE token": (_vocab(model, ["q"], [BYTE]), "tokenizer.short_byte_token")
        for model in ("llama", "t5", "gpt2", "gemma4")
    },
    "gpt2 with a 2-byte BYTE token": (_vocab("gpt2", ["é"], [BYTE]), "tokenizer.short_byte_token"),
    "llama with a 3-byte BYTE token": (_vocab("llama", ["qqq"], [BYTE]), "tokenizer.bad_byte_token"),
    "llama with an empty BYTE token": (_vocab("llama", [""], [BYTE]), "tokenizer.bad_byte_token"),
    "plamo2 with '<0x-1>' only": (_vocab("plamo2", ["<0x-1>"], [BYTE]), "tokenizer.missing_byte_tokens"),
    "plamo2 without byte tokens": (_vocab("plamo2"), "tokenizer.missing_byte_tokens"),
    "plamo2 with 255 bytes": (_vocab("plamo2", _BYTES[1:], [BYTE] * 255), "tokenizer.missing_byte_tokens"),
    "plamo2 with 256 bytes": (_vocab("plamo2", _BYTES, [BYTE] * 256), None),
    "plamo2 with 256 lowercase bytes": (
        _vocab("plamo2", [t.lower().replace("<0X", "<0x") for t in _BYTES], [BYTE] * 256),
        None,
    ),
    "plamo2 with 256 bytes and '<0x-1>'": (
        _vocab("plamo2", [*_BYTES, "<0x-1>"], [BYTE] * 257),
        "tokenizer.bad_byte_token",
    ),
    "suppress_tokens int32, out of range too": (
        _vocab("llama", extra=[kv_array(_SUPPRESS, ValueType.INT32, [3, 99, -1])]),
        None,
    ),
    "suppress_tokens uint32": (
        _vocab("llama", extra=[kv_array(_SUPPRESS, ValueType.UINT32, [3])]),
        "tokenizer.wrong_array_type",
    ),
    "suppress_tokens a scalar": (_vocab("gpt2", extra=[kv_i32(_SUPPRESS, 3)]), "tokenizer.wrong_array_type"),
    "t5 charsmap a string": (_vocab("t5", extra=[kv_str(_CHARSMAP, "abc")]), "tokenizer.wrong_array_type"),
    "t5 charsmap of int32": (
        _vocab("t5", extra=[kv_array(_CHARSMAP, ValueType.INT32, [1, 2])]),
        "tokenizer.wrong_array_type",
    ),
    "t5 charsmap of 3 bytes": (
        _vocab("t5", extra=[kv_array(_CHARSMAP, ValueType.UINT8, [1, 2, 3])]),
        "tokenizer.bad_charsmap",
    ),
    "t5 charsmap blob past the end": (
        _vocab("t5", extra=[kv_array(_CHARSMAP, ValueType.UINT8, [8, 0, 0, 0, 0, 0, 0, 0])]),
        "tokenizer.bad_charsmap",
    ),
    "t5 charsmap blob to the end": (
        _vocab("t5", extra=[kv_array(_CHARSMAP, ValueType.INT8, [4, 0, 0, 0, 0, 0, 0, 0])]),
        "tokenizer.bad_charsmap",
    ),
    "llama ignores a charsmap": (_vocab("llama", extra=[kv_str(_CHARSMAP, "abc")]), None),
    "llama with a duplicate token": (_vocab("llama", ["ab"], [1]), "tokenizer.duplicate_token"),
    "bert with a duplicate token": (_vocab("bert", ["a"], [1]), "tokenizer.duplicate_token"),
    "gpt2 with duplicate empty tokens": (_vocab("gpt2", ["", ""], [1, 1]), None),
    # llama.cpp reads each text as a C string: up to its first NUL (the conformance fuzzer's flipped bytes).
    "llama with a token equal to another up to a NUL": (_vocab("llama", ["ab\x00c"], [1]), "tokenizer.duplicate_token"),
    "gpt2 with two tokens empty up to a NUL": (_vocab("gpt2", ["\x00", "\x00x"], [1, 1]), None),
    "llama with a BYTE token one byte up to a NUL": (
        _vocab("llama", ["<\x000x41>"], [BYTE]),
        "tokenizer.short_byte_token",
    ),
    "duplicate, but an unknown pre first": (
        _vocab("gpt2", ["ab"], [1], pre="made-up"),
        "tokenizer.unknown_pre",
    ),
    "bert BYTE token, but suppress_tokens refused first": (
        _vocab("bert", ["<0x41>"], [BYTE], [kv_array(_SUPPRESS, ValueType.UINT32, [3])]),
        "tokenizer.wrong_array_type",
    ),
    "rwkv with a 1-byte BYTE token": (_vocab("rwkv", ["q"], [BYTE]), "tokenizer.bad_byte_token"),
}


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    found = find_oracle()
    if found is None:
        pytest.skip("the llama.cpp oracle (../shared/llama.cpp/bin/llama-verdict) is not here")
    return found


def _parse(data: bytes) -> Header:
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def _findings() -> dict[str, list[Finding]]:
    return {name: list(check_semantics(_parse(data))) for name, (data, _) in CASES.items()}


def test_each_class_is_found() -> None:
    for name, found in _findings().items():
        code = CASES[name][1]
        codes = [f.code for f in found if f.code.startswith(("tokenizer.", "meta."))]
        assert (code in codes) if code else codes == [], (name, codes)


def test_each_verdict_is_the_oracles(tmp_path: Path, oracle: Oracle) -> None:
    paths = []
    for i, (data, _) in enumerate(CASES.values()):
        paths.append(tmp_path / f"{i:03d}.gguf")
        paths[-1].write_bytes(data)
    verdicts = oracle.ask(paths, stage=Stage.VOCAB)
    wrong = {}
    for (name, found), answer in zip(_findings().items(), verdicts, strict=True):
        code = CASES[name][1]
        expected = _ORACLE_VERDICT[answer.verdict]
        if llama_cpp_verdict(found) is not expected or (code and CODES[code].llama_cpp is not expected):
            wrong[name] = (answer.verdict, answer.message[-100:], [f.code for f in found])
    assert wrong == {}


def test_duplicates_are_found_exactly() -> None:
    """The keyed search agrees with a set over the texts, long texts sharing their ends included."""
    rng = random.Random(18)
    alphabet = ["a", "b", "é", "\x00"]
    for _ in range(200):
        texts = ["".join(rng.choices(alphabet, k=rng.choice([0, 1, 2, 9, 17, 30]))) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.5:
            texts = ["x" * 8 + t + "y" * 8 for t in texts]
        data = build_gguf([kv_array("t", ValueType.STRING, texts)], [])
        tokens = _parse(data).metadata["t"].value
        assert isinstance(tokens, StringArray)
        first_seen: dict[str, int] = {}
        expected = None
        for i, text in enumerate(texts):
            if text and text in first_seen and expected is None:
                expected = (first_seen[text], i)
            first_seen.setdefault(text, i)
        found = _first_duplicate(tokens)
        assert (found is None) == (expected is None), texts
        if found is not None:
            assert texts[found[0]] == texts[found[1]] and found[0] < found[1], texts


def test_an_abort_after_a_refusing_header_is_never_reached(tmp_path: Path, oracle: Oracle) -> None:
    """llama.cpp refuses an empty key while reading the header: the duplicate tokens after it never abort
    (the conformance fuzzer's flipped bytes found it)."""
    from gguf_audit.audit import AuditConfig, audit_file

    paths = [tmp_path / "duplicate.gguf", tmp_path / "duplicate-and-empty-key.gguf"]
    for path, extra in zip(paths, ([], [kv_str("", "x")]), strict=True):
        path.write_bytes(_vocab("llama", ["ab"], [1], extra))
    audits = [audit_file(str(p), config=AuditConfig(templates=False)) for p in paths]
    assert "tokenizer.duplicate_token" in [f.code for f in audits[0].findings]
    assert audits[0].llama_cpp is LlamaCpp.ABORTS
    assert "header.empty_key" in [f.code for f in audits[1].findings]
    assert "tokenizer.duplicate_token" not in [f.code for f in audits[1].findings]
    assert audits[1].llama_cpp is LlamaCpp.REFUSES
    assert [v.verdict for v in oracle.ask(paths, stage=Stage.VOCAB)] == ["aborted", "refused"]


def test_up_to_nul_is_each_text_as_a_c_reader_sees_it() -> None:
    rng = random.Random(19)
    for _ in range(200):
        texts = ["".join(rng.choices(["a", "é", "\x00"], k=rng.randint(0, 6))) for _ in range(rng.randint(0, 8))]
        tokens = _parse(build_gguf([kv_array("t", ValueType.STRING, texts)], [])).metadata["t"].value
        assert isinstance(tokens, StringArray)
        assert list(tokens.up_to_nul()) == [t.split("\x00", 1)[0] for t in texts], texts


def _sweep_vocab(rng: random.Random) -> bytes:
    """A vocabulary of a random tokenizer model with random byte tokens, duplicates, side arrays and names."""
    model = rng.choice([*sorted(llama_tables().tokenizer_models), "made-up"])
    tokens, types = list(_BASE), list(_BASE_TYPES)
    n_bytes = rng.choice([0, 0, 1, 3, 256])
    if n_bytes == 256:
        tokens += _BYTES
        types += [BYTE] * 256
    else:
        for _ in range(n_bytes):
            tokens.append(rng.choice(["<0x41>", "q", "qq", "qqq", "<0x-1>", "", "é"]))
            types.append(BYTE)
    extra: list[KV] = []
    roll = rng.random()
    if roll < 0.15:
        extra.append(kv_array(_SUPPRESS, ValueType.INT32, [3, 99]))
    elif roll < 0.25:
        extra.append(kv_array(_SUPPRESS, ValueType.UINT32, [3]))
    roll = rng.random()
    if roll < 0.1:
        extra.append(kv_array(_CHARSMAP, ValueType.UINT8, [1, 2]))
    elif roll < 0.2:
        extra.append(kv_array(_CHARSMAP, ValueType.UINT8, [100, 0, 0, 0, 0, 0, 0, 0]))
    pre = rng.choice(["default", "qwen35", "glm5", "kimi-k2", "made-up", None])
    return _vocab(model, tokens[len(_BASE) :], types[len(_BASE) :], extra, pre=pre, merges=rng.random() < 0.7)


def test_a_seeded_sweep_agrees_with_the_oracle(tmp_path: Path, oracle: Oracle) -> None:
    """200 random vocabularies (seeded): the semantic checks' verdict is llama.cpp's for every one."""
    rng = random.Random(18)
    files = [_sweep_vocab(rng) for _ in range(200)]
    paths = []
    for data in files:
        paths.append(tmp_path / f"{len(paths):03d}.gguf")
        paths[-1].write_bytes(data)
    wrong = {}
    for path, data, answer in zip(paths, files, oracle.ask(paths, stage=Stage.VOCAB), strict=True):
        found = list(check_semantics(_parse(data)))
        if llama_cpp_verdict(found) is not _ORACLE_VERDICT[answer.verdict]:
            wrong[path.name] = (answer.verdict, answer.message[-100:], sorted({f.code for f in found}))
    assert wrong == {}


def test_the_duplicate_message_names_the_cut_only_when_a_token_holds_a_nul() -> None:
    """The texts are compared up to their first NUL; the message says so only when that cut a token (the zero
    bytes of the length words between the texts are no NUL of any token)."""
    found = _findings()
    plain = [f for f in found["llama with a duplicate token"] if f.code == "tokenizer.duplicate_token"]
    cut = [f for f in found["llama with a token equal to another up to a NUL"] if f.code == "tokenizer.duplicate_token"]
    assert len(plain) == len(cut) == 1
    assert "NUL" not in plain[0].message
    assert "each read up to its first NUL byte" in cut[0].message
