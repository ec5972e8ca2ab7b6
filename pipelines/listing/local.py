"""Local listings that follow symlinks, each real file once, and name every entry they skip.

fsspec's local ``find`` reports a symlink as type ``other`` and never enters
a symlinked directory, so the commonest local layout, a Hugging Face cache
(``models--org--name/snapshots/<sha>/x.gguf -> ../../blobs/<hash>``), would
list as nothing. :func:`walk_local` walks with ``os.scandir``: a symlink to a
file lists as that file under the path the user sees (the snapshot path),
with the target's size and modification time; a symlinked directory is
entered once (each real directory is walked at most once, which also stops
loops); a real file reached under two paths (two snapshots sharing a blob,
hard links) is audited under the first path in sorted order and the others
are named. Broken links, loops, aliases of a directory already walked,
special files and unreadable directories are returned as :class:`Skipped`
entries, so a run can count and name them instead of dropping them silently.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LocalWalk", "Skipped", "walk_local"]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A listed entry that gets no audit, and why (one line)."""

    url: str
    reason: str

    def __str__(self) -> str:
        return f"{self.url}: {self.reason}"


@dataclass(frozen=True, slots=True)
class LocalWalk:
    """What :func:`walk_local` found: file infos by path (fsspec's shape) and the entries it skipped."""

    files: Mapping[str, Mapping[str, Any]]
    skipped: tuple[Skipped, ...]


_Info = tuple[int, float, bool]
"""A file's size, modification time and whether it was reached through a link: three values, not a dict."""


def _file_info(st: os.stat_result, *, link: bool) -> _Info:
    return (st.st_size, st.st_mtime, link)


class _Infos(Mapping[str, Mapping[str, Any]]):
    """File infos by path in fsspec's shape, each dict made when asked for (a tree's worth never at once)."""

    __slots__ = ("_infos",)

    def __init__(self, infos: dict[str, _Info]) -> None:
        self._infos = infos

    def __getitem__(self, path: str) -> Mapping[str, Any]:
        size, mtime, link = self._infos[path]
        return {"type": "file", "size": size, "mtime": mtime, "islink": link}

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)


def walk_local(
    root: str, wanted: Callable[[str], bool], to_url: Callable[[str], str] = lambda p: "file://" + p
) -> LocalWalk:
    """Every regular file under the directory ``root`` (an absolute path), symlinks followed.

    ``wanted(rel)`` says whether a path relative to ``root`` is one the scan
    covers: only such entries are named when skipped (a broken link to a
    README is no news). ``to_url`` makes the URL a skipped entry is named by.
    """
    root = root.rstrip(os.sep) or os.sep
    skipped: list[Skipped] = []
    # The first path of each real file; a list only for files reached under several paths (rare).
    first_of: dict[tuple[int, int], tuple[str, _Info]] = {}
    more_of: dict[tuple[int, int], list[tuple[str, _Info]]] = {}
    try:
        root_st = os.stat(root)
    except OSError as exc:
        return LocalWalk({}, (Skipped(to_url(root), f"cannot list: {type(exc).__name__}"),))
    walked: dict[tuple[int, int], str] = {(root_st.st_dev, root_st.st_ino): root}
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            skipped.append(Skipped(to_url(directory), f"cannot list: {type(exc).__name__}: {exc.strerror}"))
            continue
        subdirs: list[str] = []
        for entry in entries:
            path = entry.path
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                is_link = entry.is_symlink()
                st = os.stat(path)  # follows links; a broken or looping link raises
            except OSError as exc:
                if wanted(rel):
                    why = "symlink loop" if exc.errno == errno.ELOOP else "broken symlink"
                    skipped.append(Skipped(to_url(path), f"{why} ({type(exc).__name__})"))
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                first = walked.get(key)
                if first is not None:
                    reason = "symlink loop" if _is_within(first, directory) else "same directory as"
                    skipped.append(Skipped(to_url(path), f"{reason} {to_url(first)}"))
                    continue
                walked[key] = path
                subdirs.append(path)
                continue
            if not wanted(rel):
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(Skipped(to_url(path), "not a regular file"))
                continue
            key = (st.st_dev, st.st_ino)
            found = (path, _file_info(st, link=is_link))
            if key in first_of:
                more_of.setdefault(key, []).append(found)
            else:
                first_of[key] = found
        stack.extend(reversed(subdirs))  # depth first, in name order
    files: dict[str, _Info] = {}
    for key, kept_first in first_of.items():
        paths = [kept_first, *more_of.get(key, ())]
        # One path per real file: a Hugging Face cache's snapshot path rather than its blob's hash name.
        kept, info = min(paths, key=lambda p: _is_hf_blob(p[0]))
        files[kept] = info
        skipped.extend(Skipped(to_url(p), f"same file as {to_url(kept)}") for p, _ in paths if p != kept)
    del first_of, more_of
    return LocalWalk(_Infos(files), tuple(sorted(skipped, key=lambda s: s.url)))


def _is_hf_blob(path: str) -> bool:
    """Whether ``path`` is a blob of a Hugging Face cache (``models--org--name/blobs/<hash>``)."""
    parent = os.path.dirname(path)
    return os.path.basename(parent) == "blobs" and os.path.basename(os.path.dirname(parent)).startswith("models--")


def _is_within(ancestor: str, path: str) -> bool:
    """Whether ``path`` is ``ancestor`` or below it (a link back up is a loop, not an alias)."""
    return path == ancestor or path.startswith(ancestor.rstrip(os.sep) + os.sep)
