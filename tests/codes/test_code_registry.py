"""The registry of finding codes: the Code enum and the area tables hold the same codes, each in its area."""

from __future__ import annotations

import pytest

from gguf_audit.codes import AREAS, CODES, CORE_CODES, LLAMA_CPP_BUILD, Code, CodeInfo, LlamaCpp, Severity
from gguf_audit.codes.registry import build_registry
from gguf_audit.findings import finding
from gguf_audit.llama import llama_tables


def test_the_enum_and_the_registry_hold_the_same_codes() -> None:
    in_enum = {str(c) for c in Code}
    in_registry = set(CODES)
    assert in_enum - in_registry == set(), "Code members without an entry in their area's table"
    assert in_registry - in_enum == set(), "registered codes without a Code member"


def test_a_member_is_named_after_its_code() -> None:
    misnamed = [m.name for m in Code if m.name != m.value.upper().replace(".", "_")]
    assert misnamed == []


def test_every_area_table_holds_only_its_own_codes() -> None:
    for area, entries in AREAS.items():
        assert entries, area
        assert {info.code.area for info in entries} == {area}
    assert sum(len(entries) for entries in AREAS.values()) == len(CODES) == len(Code)


def test_every_entry_is_one_line_with_a_known_verdict_type() -> None:
    for code, info in CODES.items():
        assert info.code == code and isinstance(info.code, Code)
        assert isinstance(info.severity, Severity)
        assert info.llama_cpp is None or isinstance(info.llama_cpp, LlamaCpp)
        assert info.doc and "\n" not in info.doc and info.doc == info.doc.strip(), code


def test_core_codes_are_registered() -> None:
    assert set(Code) >= CORE_CODES


def test_a_code_looks_up_the_same_entry_as_its_text() -> None:
    assert CODES[Code.DATA_TRUNCATED] is CODES["data.truncated"]
    made = finding(Code.DATA_TRUNCATED, "tensor 'x' ends at 10, past the file's 8 bytes")
    assert made.code == "data.truncated" and type(made.code) is str
    assert made.severity is Severity.ERROR and made.llama_cpp is LlamaCpp.REFUSES


@pytest.mark.parametrize(
    ("areas", "why"),
    [
        ({"header": (CodeInfo(Code.DATA_TRUNCATED, Severity.ERROR, None, "x"),)}, "in the table of area 'header'"),
        ({"data": (CodeInfo(Code.DATA_TRUNCATED, Severity.ERROR, None, "x"),) * 2}, "registered twice"),
    ],
)
def test_a_misplaced_or_repeated_entry_is_refused(areas: dict[str, tuple[CodeInfo, ...]], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        build_registry(areas)


def test_the_hparams_docs_quote_the_generated_bounds() -> None:
    """The hparams entries are written by hand; the bounds they quote are the pinned build's generated tables."""
    tables = llama_tables()
    docs = {
        c: " ".join(CODES[c].doc.split())
        for c in (Code.HPARAMS_BLOCK_COUNT_OUT_OF_RANGE, Code.HPARAMS_TOO_MANY_EXPERTS)
    }
    assert f"LLAMA_MAX_LAYERS ({tables.max_layers} in {tables.build})" in docs[Code.HPARAMS_BLOCK_COUNT_OUT_OF_RANGE]
    assert f"LLAMA_MAX_EXPERTS ({tables.max_experts} in {tables.build})" in docs[Code.HPARAMS_TOO_MANY_EXPERTS]
    assert tables.build == LLAMA_CPP_BUILD
