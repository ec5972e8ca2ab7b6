"""The command line, called in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus import REPO, corpus_dir

from gguf_audit.cli import codes_markdown, main
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like


def test_inspect_json_has_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_dir() / "models/tiny-llama-Q4_K_M.gguf"
    assert main(["inspect", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {
        "url", "size", "version", "byte_order", "alignment", "header_bytes", "data_offset",
        "loadable", "metadata", "tensors", "problems", "io",
    }  # fmt: skip
    assert out["byte_order"] == "little" and out["loadable"] is True
    assert [p for p in out["problems"] if p["severity"] != "info"] == []
    assert out["metadata"]["general.architecture"] == {"type": "string", "value": "llama", "length": None}
    tokens = out["metadata"]["tokenizer.ggml.tokens"]
    assert tokens == {"type": "array[string]", "value": None, "length": 2048}
    first = out["tensors"][0]
    assert set(first) == {"name", "type", "type_id", "shape", "offset", "data_offset", "n_bytes"}
    assert first["type"] == "Q6_K" and first["shape"] == [256, 2048]
    assert out["io"]["requests"] >= 1 and out["io"]["bytes_read"] > 0


def test_inspect_full_arrays(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_dir() / "models/tiny-llama-Q4_K_M.gguf"
    assert main(["inspect", str(path), "--json", "--full-arrays"]) == 0
    out = json.loads(capsys.readouterr().out)
    tokens = out["metadata"]["tokenizer.ggml.tokens"]["value"]
    assert len(tokens) == 2048 and tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert len(out["metadata"]["tokenizer.ggml.scores"]["value"]) == 2048


def test_inspect_exit_status_follows_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kvs, tensors = tiny_llama_like()
    data = build_gguf(kvs, tensors)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert main(["inspect", str(cut)]) == 1
    text = capsys.readouterr().out
    assert "data.truncated" in text and "loadable by llama.cpp: NO" in text
    big = tmp_path / "be.gguf"
    big.write_bytes(build_gguf(kvs, tensors, big_endian=True))
    # Its one finding is a warning, but llama.cpp refuses the file: inspect fails it.
    assert main(["inspect", str(big)]) == 1
    assert "header.big_endian" in capsys.readouterr().out
    # A warning on a file llama.cpp loads is not a failure.
    odd = tmp_path / "odd.gguf"
    renamed = [kv_str("general.name", "tiny\x1b[2J") if kv.key == "general.name" else kv for kv in kvs]
    odd.write_bytes(build_gguf(renamed, tensors))
    assert main(["inspect", str(odd)]) == 0
    text = capsys.readouterr().out
    assert "meta.control_characters" in text and "loadable by llama.cpp: yes" in text


def test_control_characters_from_the_file_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = "x\x1b[2J\x1b]0;pwned\x07\u202eevil\r\n"
    path = tmp_path / "evil.gguf"
    path.write_bytes(build_gguf([kv_str("general.name", evil), kv_str(f"key.{evil}", evil)], []))
    main(["inspect", str(path)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\r" not in out
    assert "\\x1b[2J" in out and "\\u202e" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect"]) == 2
    assert main(["inspect", "x.gguf", "--storage-options", "{not json"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["nope"]) == 2


@pytest.mark.parametrize("command", ["inspect", "scan"])
def test_an_upstream_that_holds_nothing_is_a_usage_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo or an empty folder given to --upstream is refused (exit 2, one line), never silently compared with
    nothing; a folder with a config.json is taken."""
    model = corpus_dir() / "models/tiny-llama-Q4_K_M.gguf"
    target = [str(model)] if command == "inspect" else [str(model.parent), "--out", str(tmp_path / "out")]
    (tmp_path / "empty").mkdir()
    for missing in (tmp_path / "typo", tmp_path / "empty"):
        assert main([command, *target, "--upstream", str(missing)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no config.json or tokenizer_config.json" in err and str(missing) in err
    assert not (tmp_path / "out").exists()  # refused before anything was written
    if command == "inspect":
        (tmp_path / "up").mkdir()
        (tmp_path / "up" / "config.json").write_text('{"max_position_embeddings": 1}')
        main([command, *target, "--upstream", str(tmp_path / "up"), "--json"])
        assert "upstream." in capsys.readouterr().out


def test_a_scheduler_that_is_no_address_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = corpus_dir() / "models"
    assert main(["scan", str(root), "--out", str(tmp_path / "out"), "--scheduler", "synchronous"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tcp://" in err[0] and "'synchronous'" in err[0] and "Traceback" not in err[0]


def test_codes_json_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    codes = {r["code"] for r in rows}
    assert {"header.bad_magic", "tensor.offset_not_packed", "data.truncated", "io.not_found"} <= codes
    assert all(r["severity"] in ("error", "warning", "info") for r in rows)


def test_docs_codes_page_is_generated() -> None:
    doc = (REPO / "docs" / "codes.md").read_text(encoding="utf-8")
    assert doc.strip() == codes_markdown().strip(), "regenerate: gguf-audit codes --markdown > docs/codes.md"


def test_demo_scans_the_sample_collection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The README's main job, end to end on a local cluster.
    assert main(["demo", str(tmp_path / "c"), "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for code in ("data.truncated", "header.string_too_long", "shard.missing", "shard.bad_index"):
        assert code in out
    assert "every listed file has exactly one row: 10 of 10" in out
    assert "query this night (views" in out and "unreadable" in out
    quiet = ["demo", str(tmp_path / "c2"), "--out", str(tmp_path / "out2"), "--workers", "1", "-q"]
    assert main(quiet) == 0
    lines = capsys.readouterr().out.splitlines()  # the collection, the committed night and its gate
    assert len(lines) == 3 and "committed to" in lines[1] and lines[2].startswith("the run passes"), lines


def test_pipeline_commands_plug_in(capsys: pytest.CaptureFixture[str]) -> None:
    """`scan` and `demo` come from gguf_audit.pipelines through the gguf_audit.commands entry points."""
    assert main(["scan", "--help"]) == 0
    assert "--incremental" in capsys.readouterr().out
    assert main(["demo", "--help"]) == 0
    assert "where to write the collection" in capsys.readouterr().out
