"""Git LFS and Xet pointer files saved as .gguf: named as pointers, with the object they stand for."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.errors import FormatError
from gguf_audit.findings import CODES, LlamaCpp
from gguf_audit.format import parse_header
from gguf_audit.format.pointer import MAX_POINTER_BYTES, Pointer, parse_pointer
from gguf_audit.testing.oracle import find_oracle

SHA = hashlib.sha256(b"tiny-llama").hexdigest()
LFS = f"version https://git-lfs.github.com/spec/v1\noid sha256:{SHA}\nsize 1719840\n".encode()
XET = f'# xet version 0\n\nfilesize = 1719840\nhash = "{SHA}"\n'.encode()


def test_lfs_pointer_is_parsed() -> None:
    assert parse_pointer(LFS, len(LFS)) == Pointer("lfs", SHA, 1719840)


def test_xet_pointer_is_parsed() -> None:
    assert parse_pointer(XET, len(XET)) == Pointer("xet", SHA, 1719840)


def test_pre_release_lfs_version_and_extension_lines_are_accepted() -> None:
    old = f"version https://hawser.github.com/spec/v1\next-0-foo sha256:{'0' * 64}\noid sha256:{SHA}\nsize 7\n"
    assert parse_pointer(old.encode()) == Pointer("lfs", SHA, 7)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"GGUF\x03\x00\x00\x00",
        LFS.replace(b"sha256:", b"sha1:"),  # another hash
        LFS.replace(SHA.encode(), SHA[:40].encode()),  # a short oid
        LFS.replace(b"size 1719840", b"size -1"),
        LFS.replace(b"version https", b"Version https"),
        XET.replace(b"filesize = 1719840", b'filesize = "1719840"'),
        XET.replace(b"filesize = 1719840", b"filesize = true"),
        XET.replace(b'hash = "', b'hash = "zz'),
        XET + b"[unclosed",
        LFS + b"x" * MAX_POINTER_BYTES,  # too long to be a pointer
    ],
)
def test_other_bytes_are_no_pointer(data: bytes) -> None:
    assert parse_pointer(data, len(data)) is None


def test_a_prefix_of_a_longer_file_is_no_pointer() -> None:
    assert parse_pointer(LFS, len(LFS) + 1) is None
    assert parse_pointer(LFS, 10_000) is None


@pytest.mark.parametrize(("data", "named"), [(LFS, f"oid sha256:{SHA}, size 1719840"), (XET, f"hash {SHA}")])
def test_parser_names_the_pointer_instead_of_a_bad_magic(data: bytes, named: str) -> None:
    with pytest.raises(FormatError) as raised:
        parse_header(data, len(data))
    assert raised.value.code == "header.lfs_pointer"
    assert named in raised.value.message


def test_other_text_stays_a_bad_magic() -> None:
    with pytest.raises(FormatError) as raised:
        parse_header(b"<html>not found</html>\n", 23)
    assert raised.value.code == "header.bad_magic"


def test_audit_of_a_pointer_saved_as_gguf(tmp_path: Path) -> None:
    path = tmp_path / "tiny-llama-Q4_K_M.gguf"
    # A real pointer: the one git-lfs writes for the corpus file.
    real = (corpus_dir() / "models" / "tiny-llama-Q4_K_M.gguf").read_bytes()
    digest = hashlib.sha256(real).hexdigest()
    path.write_bytes(f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {len(real)}\n".encode())
    result = audit_file(str(path), config=AuditConfig())
    assert [f.code for f in result.findings] == ["header.lfs_pointer"]
    assert digest in result.findings[0].message and str(len(real)) in result.findings[0].message
    assert result.loadable is False


def test_llama_cpp_refuses_a_pointer(tmp_path: Path) -> None:
    oracle = find_oracle()
    if oracle is None:
        pytest.skip("no llama.cpp oracle")
    paths = [tmp_path / "lfs.gguf", tmp_path / "xet.gguf"]
    paths[0].write_bytes(LFS)
    paths[1].write_bytes(XET)
    verdicts = oracle.ask(paths)
    assert [v.verdict for v in verdicts] == ["refused", "refused"], verdicts
    assert CODES["header.lfs_pointer"].llama_cpp is LlamaCpp.REFUSES
