"""llama.cpp itself as the oracle: ``llama-verdict`` from ``../shared/llama.cpp`` asked about files.

The pinned build's ``bin/llama-verdict`` opens each file in a child process and
prints one JSON line: ``loaded``, ``refused``, ``aborted`` (a failed
``GGML_ASSERT``: the process died) or ``timeout``. Tests and benchmarks ask it
instead of reasoning about llama.cpp's sources.

The folder is found at ``$GGUF_AUDIT_LLAMA_CPP`` or ``../shared/llama.cpp``
beside the checkout. A copy of that folder may hold its library symlinks as
small text files naming their targets (a copy that did not keep links); the
loader cannot use those, so :func:`find_oracle` then assembles a runnable copy
(the binary, the real libraries, the links remade) once per process in a
temporary folder.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

__all__ = ["ORACLE_ENV", "Oracle", "OracleVerdict", "Stage", "find_oracle", "oracle_dir"]

ORACLE_ENV: Final = "GGUF_AUDIT_LLAMA_CPP"
"""Environment variable naming the oracle folder (the one with ``bin/llama-verdict``)."""

_LINK_STUB_MAX_BYTES: Final = 256
"""A library 'file' this small is a symlink saved as text (its target's name), not a library."""


class Stage(StrEnum):
    """How far llama-verdict goes: the whole model load, the vocabulary only, or ggml's header parser."""

    MODEL = "model"
    VOCAB = "vocab"
    GGUF = "gguf"
    NO_ALLOC = "no-alloc"


_STAGE_FLAGS: Final = {
    Stage.MODEL: (),
    Stage.VOCAB: ("--vocab-only",),
    Stage.GGUF: ("--gguf",),
    Stage.NO_ALLOC: ("--no-alloc",),
}


@dataclass(frozen=True, slots=True)
class OracleVerdict:
    """llama.cpp's answer for one file."""

    path: str
    verdict: str
    """``loaded``, ``refused``, ``aborted`` or ``timeout``."""
    message: str
    signal: int

    @property
    def loads(self) -> bool:
        return self.verdict == "loaded"


def oracle_dir() -> Path:
    """Where the oracle folder should be (it may be missing)."""
    configured = os.environ.get(ORACLE_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path(__file__).resolve().parents[2].parent / "shared" / "llama.cpp"


_lock = threading.Lock()
_runnable: dict[Path, Path] = {}


def find_oracle() -> Oracle | None:
    """The oracle, runnable, or None when its folder or binary is missing."""
    folder = oracle_dir()
    binary = folder / "bin" / "llama-verdict"
    if not binary.is_file():
        return None
    with _lock:
        if folder not in _runnable:
            _runnable[folder] = _runnable_copy(folder) if _has_link_stubs(folder / "lib") else folder
        return Oracle(_runnable[folder] / "bin" / "llama-verdict")


def _has_link_stubs(lib: Path) -> bool:
    return any(
        p.is_file() and not p.is_symlink() and p.stat().st_size < _LINK_STUB_MAX_BYTES for p in lib.glob("*.so*")
    )


def _runnable_copy(folder: Path) -> Path:
    """``bin/`` and ``lib/`` copied to a temporary folder, each text stub replaced by the link it names."""
    out = Path(tempfile.mkdtemp(prefix="gguf-audit-oracle-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    shutil.copytree(folder / "bin", out / "bin")
    (out / "lib").mkdir()
    for item in sorted((folder / "lib").iterdir()):
        target = out / "lib" / item.name
        if item.is_file() and not item.is_symlink() and item.stat().st_size < _LINK_STUB_MAX_BYTES:
            target.symlink_to(item.read_text().strip())
        else:
            shutil.copy2(item, target, follow_symlinks=False)
    return out


@dataclass(frozen=True, slots=True)
class Oracle:
    """A runnable ``llama-verdict``."""

    binary: Path

    def ask(
        self, paths: Sequence[str | os.PathLike[str]], *, stage: Stage = Stage.MODEL, timeout_s: float = 60.0
    ) -> list[OracleVerdict]:
        """llama.cpp's verdict on each file, in order (one child process per file, run by the harness)."""
        if not paths:
            return []
        flags = [*_STAGE_FLAGS[stage], f"--timeout={max(1, int(timeout_s))}"]
        done = subprocess.run(
            [str(self.binary), *flags, *(os.fspath(p) for p in paths)],
            capture_output=True,
            check=False,
            timeout=timeout_s * len(paths) + 30,
        )
        verdicts = list(_parse_lines(done.stdout.decode("utf-8", "replace").splitlines()))
        if len(verdicts) != len(paths):
            err = done.stderr.decode("utf-8", "replace")[-500:]
            raise RuntimeError(f"llama-verdict answered {len(verdicts)} of {len(paths)} files: {err}")
        return verdicts

    def ask_one(self, path: str | os.PathLike[str], *, stage: Stage = Stage.MODEL) -> OracleVerdict:
        return self.ask([path], stage=stage)[0]


def _parse_lines(lines: Iterable[str]) -> Iterable[OracleVerdict]:
    for line in lines:
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        yield OracleVerdict(
            str(row["path"]), str(row["verdict"]), str(row.get("message", "")), int(row.get("signal", 0))
        )
