"""Git LFS and Xet pointer files: the text a mirror holds when it cloned without fetching the large files.

A repository cloned without ``git lfs`` (or without the Xet transfer agent)
checks out, in place of each large file, a small text file that names it by
hash and size. Saved as ``model.gguf``, such a file fails llama.cpp's magic
check like any other non-GGUF bytes, but what it means is different: the
model was never downloaded, and the pointer says which bytes are missing.

Two formats exist:

- Git LFS (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md): lines
  of ``key value`` sorted by key, ``version`` first, at most 1024 bytes::

      version https://git-lfs.github.com/spec/v1
      oid sha256:<64 hex digits>
      size <bytes>

  (pre-release clients wrote ``https://hawser.github.com/spec/v1``).
- Xet (xet-core's ``PointerFile``): a TOML document whose first line is
  ``# xet version <v>``, with a string ``hash`` (a Merkle hash, not a sha256)
  and an integer ``filesize``. Hugging Face's Xet storage still serves LFS
  pointers to plain git clients, so this form comes from XetHub-era tools.

Pure: bytes in, a :class:`Pointer` or None out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["MAX_POINTER_BYTES", "Pointer", "parse_pointer"]

MAX_POINTER_BYTES: Final = 1024
"""The LFS spec's bound on a pointer file's size (Xet's is 150); anything longer is not read as one."""

_LFS_VERSION: Final = re.compile(rb"\Aversion https://(?:git-lfs\.github\.com|hawser\.github\.com)/spec/v1\n")
_LFS_OID: Final = re.compile(rb"^oid sha256:([0-9a-f]{64})$", re.MULTILINE)
_LFS_SIZE: Final = re.compile(rb"^size (\d{1,20})$", re.MULTILINE)
_XET_VERSION: Final = re.compile(rb"\A# xet version ([0-9][0-9.]*)\r?\n")
_XET_HASH: Final = re.compile(r"\A[0-9a-f]{64}\Z")


@dataclass(frozen=True, slots=True)
class Pointer:
    """A pointer file's claim: the object it stands for."""

    kind: Literal["lfs", "xet"]
    digest: str
    """For LFS the object's sha256, for Xet its Merkle hash (64 hex digits)."""
    size_bytes: int
    """The size of the object pointed to."""

    def describe(self) -> str:
        """One line naming the pointer and what it stands for."""
        if self.kind == "lfs":
            return f"a Git LFS pointer (oid sha256:{self.digest}, size {self.size_bytes})"
        return f"a Xet pointer (hash {self.digest}, filesize {self.size_bytes})"


def parse_pointer(data: bytes | memoryview, file_size: int | None = None) -> Pointer | None:
    """The pointer ``data`` holds, or None when it is not a complete Git LFS or Xet pointer file.

    ``data`` is the start of the file; ``file_size`` its listed size, when known.
    A file longer than :data:`MAX_POINTER_BYTES`, or a buffer that stops before
    the file's end, is never taken for a pointer: the judgement needs every byte.
    """
    if file_size is not None and (file_size > MAX_POINTER_BYTES or len(data) < file_size):
        return None
    text = bytes(data[: MAX_POINTER_BYTES + 1])
    if len(text) > MAX_POINTER_BYTES:
        return None
    if _LFS_VERSION.match(text):
        return _parse_lfs(text)
    if _XET_VERSION.match(text):
        return _parse_xet(text)
    return None


def _parse_lfs(text: bytes) -> Pointer | None:
    oid = _LFS_OID.search(text)
    size = _LFS_SIZE.search(text)
    if oid is None or size is None:
        return None
    return Pointer("lfs", oid.group(1).decode("ascii"), int(size.group(1)))


def _parse_xet(text: bytes) -> Pointer | None:
    import tomllib  # here: only a Xet pointer (no GGUF magic) is parsed as TOML; reading a header needs none

    try:
        doc = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    digest, size = doc.get("hash"), doc.get("filesize")
    # bool is an int subclass; a TOML ``true`` is no size.
    if not isinstance(digest, str) or not _XET_HASH.match(digest):
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return Pointer("xet", digest, size)
