"""Every key the checks read, stored as every other GGUF type in a real file: no check or renderer fails.

The keys are those of a corpus model plus every key the semantic checks look
up (recorded while they judge that model). Each variant is audited with its
sampled blocks, then rendered in every format ``inspect`` writes (text, JSON
with full arrays, SARIF) and as the per-file table rows a scan commits. No
variant may raise or give an ``internal.*`` finding; a hostile chat template
keeps all its ``template.unsafe`` findings whatever the type of a token id.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.header import check_semantics
from gguf_audit.findings import LlamaCpp, llama_cpp_verdict
from gguf_audit.format.model import KV, Header, ValueType
from gguf_audit.format.parser import parse_header
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.report.sarif import results_of_findings, sarif_json, sarif_log, sarif_run
from gguf_audit.report.text import render_text
from gguf_audit.samples import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.testing.oracle import Stage, find_oracle
from gguf_audit.testing.retype import EXAMPLE_VALUES, append_kv, replace_kv

SOURCE = "models/tiny-llama-Q4_K_M.gguf"
#: Sampled blocks depend on the metadata only through the alignment: sampled for that key, not for the others.
SAMPLED = AuditConfig(samples=SampleConfig(max_requests=1))
HEADER_ONLY = AuditConfig()
#: Read by the template step and the shard logic rather than by the semantic checks.
_ALSO_READ = ("tokenizer.chat_template", "tokenizer.ggml.merges", "split.no", "split.count", "general.alignment")


class _Recording(Mapping[str, KV]):
    """A header's metadata that remembers every key asked of it."""

    def __init__(self, inner: Mapping[str, KV], asked: set[str]) -> None:
        self._inner, self._asked = inner, asked

    def __getitem__(self, key: str) -> KV:
        self._asked.add(key)
        return self._inner[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._asked.add(key)
        return key in self._inner

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)


@cache
def _source() -> bytes:
    return (corpus_dir() / SOURCE).read_bytes()


@cache
def checked_keys() -> tuple[str, ...]:
    data = _source()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    asked: set[str] = set()
    recording = dataclasses.replace(header, metadata=_Recording(header.metadata, asked))
    renders = {"tokenizer.chat_template": "<s>[INST] hi [/INST] hello </s>"}
    list(check_semantics(recording, url=SOURCE, template_renders=renders))
    return tuple(sorted(asked | set(header.metadata) | set(_ALSO_READ)))


@cache
def _source_keys() -> frozenset[str]:
    data = _source()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return frozenset(header.metadata)


def _variant(key: str, vtype: int, value: object) -> bytes:
    data = _source()
    if key in _source_keys():
        return replace_kv(data, key, vtype, value)
    return append_kv(data, key, vtype, value)


def _render_everywhere(audit: FileAudit, *, full_arrays: bool) -> None:
    assert render_text(audit, samples=True)
    json.loads(dumps(audit_to_json(audit, full_arrays=full_arrays, samples=True)))
    run = sarif_run(results_of_findings(audit.url, audit.findings), artifacts={audit.url: audit.size})
    json.loads(sarif_json(sarif_log([run])))
    item = AuditedFile(audit=audit, listed=ListedFile(url=audit.url, size=audit.size), model_id="m")
    audits_to_tables([item], run_id="r")


def test_the_recorded_keys_cover_what_the_checks_read() -> None:
    keys = checked_keys()
    # ids, hyperparameters and tokenizer keys the corpus file lacks are asked for too
    assert {"tokenizer.ggml.bos_token_id", "llama.block_count", "tokenizer.ggml.eot_token_id"} <= set(keys)
    assert len(keys) > 40


@pytest.mark.slow
def test_every_checked_key_as_every_type_audits_and_renders(tmp_path: Path) -> None:
    failures: list[str] = []
    n = 0
    for key in checked_keys():
        for type_name, vtype, value in EXAMPLE_VALUES:
            path = tmp_path / "variant.gguf"
            path.write_bytes(_variant(key, vtype, value))
            audit = audit_file(str(path), config=SAMPLED if key == "general.alignment" else HEADER_ONLY)
            n += 1
            internal = [f for f in audit.findings if f.code.startswith("internal.")]
            if internal:
                failures.append(f"{key} as {type_name}: {internal[0].message}")
                continue
            try:
                # Whole arrays when the retyped value is one (the file's own 2,048 tokens are the same each time).
                _render_everywhere(audit, full_arrays=vtype == ValueType.ARRAY)
            except Exception as exc:  # noqa: BLE001 - collected, the test fails below with every case
                failures.append(f"{key} as {type_name}: rendering raised {type(exc).__name__}: {exc}")
    assert n > 40 * len(EXAMPLE_VALUES)
    assert failures == [], "\n".join(failures)


_HOSTILE = (
    "{% set c = cycler %}{% set t = {88: 95} %}{{ c['XXinitXX'.translate(t)]['XXglobalsXX'.translate(t)]"
    "['os'.translate(t)]['popen'.translate(t)]('id').read() }}"
)


@pytest.mark.parametrize("type_name", ["bool", "float32", "string", "array[int32]", "int64"])
def test_an_ill_typed_bos_id_keeps_the_template_findings(tmp_path: Path, type_name: str) -> None:
    hostile = replace_kv(_source(), "tokenizer.chat_template", ValueType.STRING, _HOSTILE)
    clean = tmp_path / "hostile.gguf"
    clean.write_bytes(hostile)
    expected = [f for f in audit_file(str(clean), config=AuditConfig()).findings if f.code == "template.unsafe"]
    assert len(expected) >= 4
    _, vtype, value = next(v for v in EXAMPLE_VALUES if v[0] == type_name)
    path = tmp_path / "retyped.gguf"
    path.write_bytes(replace_kv(hostile, "tokenizer.ggml.bos_token_id", vtype, value))
    audit = audit_file(str(path), config=AuditConfig())
    codes = [f.code for f in audit.findings]
    assert not [c for c in codes if c.startswith("internal.")], audit.findings
    assert [f for f in audit.findings if f.code == "template.unsafe"] == expected
    # its own finding; llama.cpp b11312 refuses the file ("key ... has wrong type bool but expected type u32")
    assert "meta.wrong_type" in codes
    assert llama_cpp_verdict(audit.findings) is LlamaCpp.REFUSES and audit.loadable is False


# Retyped keys whose verdict the checks used to get wrong, and the control case; llama.cpp b11312 judges.
_ORACLE_CASES: list[tuple[str, int, object]] = [
    # refused: "has wrong type bool but expected type u32"
    ("tokenizer.ggml.bos_token_id", ValueType.BOOL, True),
    # loaded: a llama model reads the RMS epsilon only
    ("llama.attention.layer_norm_epsilon", ValueType.STRING, "x"),
    # loaded: an SPM vocabulary reads no merges
    ("tokenizer.ggml.merges", ValueType.UINT32, 7),
    # refused: "key split.count has wrong type u32 but expected type u16"
    ("split.count", ValueType.UINT32, 1),
    # refused: "key not found in model: split.no"
    ("split.count", ValueType.UINT16, 3),
    ("general.name", ValueType.FLOAT32, 1.5),  # loaded
    # aborted (GGML_ASSERT in load_hparams): layers past 512, none, experts past 1024, more used than there are
    ("llama.block_count", ValueType.UINT32, 513),
    ("llama.block_count", ValueType.UINT32, 0),
    ("llama.expert_count", ValueType.UINT32, 2000),
    ("llama.expert_used_count", ValueType.UINT32, 3),
]


@pytest.mark.conformance
def test_retyped_keys_get_the_verdict_llama_cpp_gives(tmp_path: Path) -> None:
    oracle = find_oracle()
    if oracle is None:
        pytest.skip("the llama.cpp oracle is not built here")
    paths = []
    for i, (key, vtype, value) in enumerate(_ORACLE_CASES):
        path = tmp_path / f"case{i}.gguf"
        path.write_bytes(_variant(key, vtype, value))
        paths.append(path)
    answers = {Path(v.path).name: v for v in oracle.ask(paths, stage=Stage.MODEL)}
    wrong = []
    for (key, vtype, value), path in zip(_ORACLE_CASES, paths, strict=True):
        theirs = _ORACLE_VERDICT[answers[path.name].verdict]
        ours = llama_cpp_verdict(audit_file(str(path), config=AuditConfig()).findings)
        if ours is not theirs:
            wrong.append(f"{key} = {value!r} ({vtype}): ours {ours}, llama.cpp {theirs} ({answers[path.name].message})")
    assert wrong == []


_ORACLE_VERDICT = {"loaded": LlamaCpp.LOADS, "refused": LlamaCpp.REFUSES, "aborted": LlamaCpp.ABORTS}
