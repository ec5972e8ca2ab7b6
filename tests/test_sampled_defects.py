"""Defects planted in a 70B-like file are still found at 32 sampled requests.

The file (723 tensors, 41 GiB) is made on demand by
:class:`~gguf_audit.testing.layouts.SyntheticGGUF` and served over the loopback
HTTP server; the defects are planted before anything is read, at the data
section's start, middle and end, without looking at the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gguf_audit.audit import AuditConfig, AuditTarget, FileAudit, audit_file
from gguf_audit.io.source import ReadConfig
from gguf_audit.plan import SampleConfig, stratum_bounds
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.layouts import LLAMA_70B_LIKE, SyntheticGGUF, llama_table

CONFIG = AuditConfig(read=ReadConfig(backoff_s=0.01), samples=SampleConfig(), semantics=False, templates=False)
TABLE = llama_table(*LLAMA_70B_LIKE)


@pytest.fixture(scope="module")
def server() -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer() as srv:
        yield srv


def _audit(server: RangeHTTPServer, plant: Callable[[SyntheticGGUF], None], *, listed_full: bool = False) -> FileAudit:
    model = SyntheticGGUF(TABLE)
    plant(model)
    server.put_virtual("m.gguf", model.size, model.read)
    try:
        return audit_file(
            AuditTarget(server.url_for("m.gguf"), size=model.full_size if listed_full else None), config=CONFIG
        )
    finally:
        server.remove("m.gguf")


def _found(audit: FileAudit) -> set[tuple[str, str | None]]:
    return {(f.code, f.tensor) for f in audit.findings}


def _stratum(model: SyntheticGGUF, k: int) -> tuple[int, int]:
    return tuple(stratum_bounds(k, model.data_offset, model.full_size))  # type: ignore[return-value]


def test_the_clean_file_has_no_data_finding(server: RangeHTTPServer) -> None:
    audit = _audit(server, lambda m: None)
    assert audit.findings == [] and audit.sampled_strata == 0xFFFF


@pytest.mark.parametrize("name", ["token_embd.weight", "output.weight"])
def test_a_zero_filled_first_or_last_tensor_is_found(server: RangeHTTPServer, name: str) -> None:
    audit = _audit(server, lambda m: m.zero(m.region(name).start, m.region(name).end))
    assert _found(audit) == {("data.zero_filled", name)}


@pytest.mark.parametrize("name", ["token_embd.weight", "output.weight"])
def test_nan_scales_in_the_first_or_last_tensor_are_found(server: RangeHTTPServer, name: str) -> None:
    audit = _audit(server, lambda m: m.nan_scales(m.region(name).start, m.region(name).end))
    assert _found(audit) == {("data.nonfinite", name)}


@pytest.mark.parametrize("k", [0, 7, 15])
def test_a_zeroed_sixteenth_is_found_wherever_it_lies(server: RangeHTTPServer, k: int) -> None:
    model = SyntheticGGUF(TABLE)
    lo, hi = _stratum(model, k)
    audit = _audit(server, lambda m: m.zero(lo, hi))
    zeroed = {r.name for r in model.regions if r.start < hi and r.end > lo}
    found = _found(audit)
    assert found and {code for code, _ in found} == {"data.zero_filled"}
    assert {t for _, t in found} <= zeroed


@pytest.mark.parametrize("k", [0, 8, 15])
def test_nan_scales_over_a_sixteenth_are_found_wherever_they_lie(server: RangeHTTPServer, k: int) -> None:
    model = SyntheticGGUF(TABLE)
    lo, hi = _stratum(model, k)
    audit = _audit(server, lambda m: m.nan_scales(lo, hi))
    found = _found(audit)
    assert found and {code for code, _ in found} == {"data.nonfinite"}
    assert {t for _, t in found} <= {r.name for r in model.regions if r.start < hi and r.end > lo}


@pytest.mark.parametrize("fraction", [1 / 16, 1 / 2, 15 / 16])
def test_a_cut_file_is_found_from_its_size_or_from_its_last_blocks(server: RangeHTTPServer, fraction: float) -> None:
    def cut(m: SyntheticGGUF) -> None:
        m.cut(m.data_offset + int((m.full_size - m.data_offset) * fraction))

    # The server tells the size: the header check sees the tensors end past it.
    assert "data.truncated" in {code for code, _ in _found(_audit(server, cut))}
    # A stale listing says the file is whole, the server's Content-Range total says otherwise: the two sizes
    # disagree (after retries), which is named with both sizes, never judged a truncation on either's word.
    stale = _audit(server, cut, listed_full=True)
    mismatch = [f for f in stale.findings if f.code == "io.size_mismatch"]
    assert len(mismatch) == 1 and "the listing says the file has" in mismatch[0].message
    assert not {"data.truncated", "data.sample_unread"} & {f.code for f in stale.findings}
    assert stale.fingerprint is None
