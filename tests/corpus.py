"""Where the shared real-file corpus lives, for tests that check against it.

The corpus (files made by llama.cpp's own tools, with ggml-made ground truth)
is not part of the repository; tests read it from ``$GGUF_AUDIT_CORPUS`` or,
by default, ``../shared/corpus`` beside the repository. Every helper returns
an empty list when the corpus is absent, so parametrized tests collect as skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["corpus_dir", "gguf_files", "truth", "truth_files"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


def corpus_dir() -> Path:
    """The corpus folder; it may not exist on machines without the corpus."""
    env = os.environ.get("GGUF_AUDIT_CORPUS")
    if env:
        return Path(env)
    return _REPO_ROOT.parent / "shared" / "corpus"


def gguf_files() -> list[Path]:
    """Every ``*.gguf`` under the corpus, sorted."""
    root = corpus_dir()
    if not root.is_dir():
        return []
    return sorted(root.rglob("*.gguf"))


def truth_files() -> list[Path]:
    """Every ``*.gguf.truth.json`` under the corpus, sorted."""
    root = corpus_dir()
    if not root.is_dir():
        return []
    return sorted(root.rglob("*.gguf.truth.json"))


def truth(path: Path) -> dict[str, Any]:
    """The ggml-made ground truth beside the corpus file ``path``."""
    with open(f"{path}.truth.json", encoding="utf-8") as f:
        result: dict[str, Any] = json.load(f)
    return result
