"""Where the real llama.cpp-made corpus lives, and its ground truth.

Tests find it through ``GGUF_AUDIT_CORPUS``, defaulting to ``../shared/corpus``
beside the repository. ``.ci/run`` fails when it is missing, so CI always runs
the tests that read it; a missing corpus fails them loudly rather than
skipping them.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

__all__ = ["REPO", "S3_FILES", "corpus_dir", "gguf_files", "llama_source", "truth", "truth_files"]

REPO = Path(__file__).resolve().parent.parent


# The corpus files the S3 fixture uploads: a model, a big vocabulary, a shard.
S3_FILES = [
    "models/tiny-llama-Q4_K_M.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "split/tiny-llama-Q4_K_M-00002-of-00004.gguf",
]


def corpus_dir() -> Path:
    return Path(os.environ.get("GGUF_AUDIT_CORPUS", REPO.parent / "shared" / "corpus"))


def gguf_files() -> list[Path]:
    """Every .gguf file of the corpus, sorted."""
    files = sorted(corpus_dir().rglob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no GGUF corpus at {corpus_dir()}; set GGUF_AUDIT_CORPUS")
    return files


def truth_files() -> list[Path]:
    """Every ``FILE.gguf.truth.json`` of the corpus, sorted."""
    return [p.with_name(p.name + ".truth.json") for p in gguf_files()]


@cache
def truth(path: Path) -> dict[str, Any]:
    """The ground truth of one corpus file (``FILE.gguf.truth.json``)."""
    with open(path.with_name(path.name + ".truth.json"), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


LLAMA_SRC_ENV = "GGUF_AUDIT_LLAMA_SRC"
REQUIRE_LLAMA_SRC_ENV = "GGUF_AUDIT_REQUIRE_LLAMA_SRC"


def llama_source() -> Path:
    """The pinned llama.cpp source tree (``$GGUF_AUDIT_LLAMA_SRC``: the sdist's ``vendor/llama.cpp``, as
    ``.ci/run`` extracts it). Missing, the calling test skips with how to get it, or fails where
    ``GGUF_AUDIT_REQUIRE_LLAMA_SRC=1`` (CI)."""
    given = os.environ.get(LLAMA_SRC_ENV)
    if given and (Path(given) / "src" / "llama-arch.cpp").is_file():
        return Path(given)
    reason = (
        f"the pinned llama.cpp source is not here (${LLAMA_SRC_ENV}={given or ''}); extract vendor/llama.cpp of "
        "'pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36' and point it there"
    )
    if os.environ.get(REQUIRE_LLAMA_SRC_ENV) == "1":
        pytest.fail(f"{reason}, and {REQUIRE_LLAMA_SRC_ENV}=1")
    pytest.skip(reason)
