"""Local listings that follow symlinks, each real file once, and name every entry they skip.

fsspec's local ``find`` reports a symlink as type ``other`` and never enters
a symlinked directory, so the commonest local layout, a Hugging Face cache
(``models--org--name/snapshots/<sha>/x.gguf -> ../../blobs/<hash>``), would
list as nothing. :func:`walk_local` walks with ``os.scandir``: a symlink to a
file lists as that file under the path the user sees (the snapshot path),
with the target's size and modification time; a symlinked directory is
entered once (each real directory is walked at most once, which also stops
loops); a real file reached under two paths (two snapshots sharing a blob,
hard links) is audited under the first path in walk order (depth first, a
folder's files before its subfolders', names in order) and the others are
named, a Hugging Face cache's snapshot path kept over its blob's (and the snapshot
its ``refs/main`` names over an older one). Broken
links, loops, aliases of a directory already walked, special files and
unreadable directories are returned as :class:`Skipped` entries, so a run
can count and name them instead of dropping them silently.

The files go straight into columns as they are found (:class:`_Found`: their
URLs into Arrow a few thousand at a time, their numbers into typed arrays),
and hard links are found by sorting the (device, inode) columns: a tree of a
million files never becomes a million Python objects, only a few dozen bytes
a file.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.codes import Code
from gguf_audit.pipelines.spill import MappedWriter
from gguf_audit.tables.listed import ListedFile, ListedFiles

__all__ = ["LocalWalk", "Skipped", "unaudited_files", "walk_local"]

_KEY_FORMAT: Final = struct.Struct(">QQ")
_KEY_BYTES: Final = _KEY_FORMAT.size
_KEY: Final = f"S{_KEY_BYTES}"
"""A directory's key: its device and inode, big-endian, so that NumPy's byte order is theirs."""
_NAMES: Final = 4096
"""Names of one folder held as Python strings at a time while it is listed (:func:`_listed_names`)."""
_CHUNK_URLS: Final = 4096
"""URLs held as Python strings at a time while walking, before they become an Arrow chunk."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A listed entry that gets no audit, and why (one line).

    ``code`` is set for an entry that may hide a file from the audit (a name
    that is not UTF-8, a broken link, an unreadable directory, a special
    file): the listing gives it a row of its own with that error, so that it
    counts against every gate. Without one the entry is only named (a second
    path to a file or directory listed under its first).
    """

    url: str
    reason: str
    code: Code | None = None

    def __str__(self) -> str:
        return f"{self.url}: {self.reason}"


@dataclass(frozen=True, slots=True)
class LocalWalk:
    """What :func:`walk_local` found: the files as the listing's columns, in URL order, and the entries it
    skipped (sorted by URL)."""

    files: ListedFiles
    skipped: tuple[Skipped, ...]


class _Found:
    """Every regular file the walk reaches, in walk order, as columns: its URL, device, inode, size,
    modification time, and whether its path is a Hugging Face cache's blob.

    The URLs go to the driver's disk a chunk at a time as they are found
    (:class:`~gguf_audit.pipelines.spill.MappedWriter`), as the night
    keeps its listing: in the heap they were most of the walk's peak.
    """

    __slots__ = ("_pending", "_writer", "dev", "hf_blob", "ino", "mtime", "size")

    def __init__(self) -> None:
        self._writer = MappedWriter()
        self._pending: list[str] = []
        self.dev = array("Q")
        self.ino = array("Q")
        self.size = array("q")
        self.mtime = array("d")
        self.hf_blob = array("B")

    def add(self, url: str, st: os.stat_result, *, hf_blob: bool) -> None:
        self._pending.append(url)
        if len(self._pending) == _CHUNK_URLS:
            self._flush()
        self.dev.append(st.st_dev)
        self.ino.append(st.st_ino)
        self.size.append(st.st_size)
        self.mtime.append(st.st_mtime)
        self.hf_blob.append(hf_blob)

    def _flush(self) -> None:
        self._writer.write(pa.record_batch({"url": pa.array(self._pending, pa.string())}))
        self._pending = []

    def forget_inodes(self) -> None:
        """Let the devices and inodes go (once hard links are found): the rest is what the listing keeps."""
        self.dev, self.ino = array("Q"), array("Q")

    def urls(self) -> pa.ChunkedArray:
        """Every URL found, in walk order, mapped from the driver's disk (called once: the file is closed)."""
        if self._pending:
            self._flush()
        written = self._writer.close()
        return written.column("url") if written is not None else pa.chunked_array([], pa.string())

    def __len__(self) -> int:
        return len(self.size)


def walk_local(
    root: str, wanted: Callable[[str], bool], to_url: Callable[[str], str] = lambda p: "file://" + p
) -> LocalWalk:
    """Every regular file under the directory ``root`` (an absolute path), symlinks followed.

    ``wanted(rel)`` says whether a path relative to ``root`` is one the scan
    covers: only such entries are listed, and only such entries are named when
    skipped (a broken link to a README is no news). ``to_url`` makes the URL
    a file is listed and named by.
    """
    root = root.rstrip(os.sep) or os.sep
    try:
        root_st = os.stat(root)
    except OSError as exc:
        return LocalWalk(
            ListedFiles(), (Skipped(to_url(root), f"cannot list: {type(exc).__name__}", Code.IO_NOT_LISTABLE),)
        )
    walk = _Walk(root, root_st, wanted, to_url)
    walk.enter(root, False)
    while walk.stack:  # depth first, a folder's files before its subfolders'
        folder = walk.stack[-1]
        name = folder.next_name()
        if folder.walked():
            walk.stack.pop()
        walk.enter(os.path.join(folder.path, name), folder.linked or name in folder.linked_names)
    found, skipped = walk.found, walk.skipped
    urls = found.urls()
    keep = _one_path_per_file(found, urls, skipped)
    found.forget_inodes()
    files = _in_url_order(found, urls, keep)
    return LocalWalk(files, tuple(sorted((_shown(s) for s in skipped), key=lambda s: s.url)))


class _Walk:
    """A walk under way: the files found, the entries skipped, the folders waiting (as names: a folder per model
    is one a file, not a scandir entry and a path each)."""

    def __init__(
        self, root: str, root_st: os.stat_result, wanted: Callable[[str], bool], to_url: Callable[[str], str]
    ) -> None:
        self.prefix = root if root.endswith(os.sep) else root + os.sep
        self.wanted, self.to_url = wanted, to_url
        self.skipped: list[Skipped] = []
        self.found = _Found()
        self.walked = _WalkedDirectories(root, root_st)
        self.stack: list[_Folder] = []

    def enter(self, directory: str, linked: bool) -> None:
        """List ``directory``: its files found, its subfolders put on the stack, in name order."""
        try:
            chunks = _listed_names(directory)
        except OSError as exc:
            why = f"cannot list: {type(exc).__name__}: {exc.strerror}"
            self.skipped.append(Skipped(self.to_url(directory), why, Code.IO_NOT_LISTABLE))
            return
        folder = _Folder(directory, linked)
        for name in itertools.chain.from_iterable(chunks):
            self._entry(folder, name)
        if folder.listed():
            self.stack.append(folder)

    def _entry(self, folder: _Folder, name: str) -> None:
        path = os.path.join(folder.path, name)
        rel = path[len(self.prefix) :].replace(os.sep, "/")  # every path walked starts with the root's
        try:
            st = os.stat(path)  # follows links; a broken or looping link raises
        except OSError as exc:
            if self.wanted(rel):
                self.skipped.append(_unreachable(self.to_url(path), exc))
            return
        if stat.S_ISDIR(st.st_mode):
            through_link = folder.linked or os.path.islink(path)
            first = self.walked.first_path(st, path, through_link)
            if first is not None:
                reason = "symlink loop" if _is_within(first, folder.path) else "same directory as"
                self.skipped.append(Skipped(self.to_url(path), f"{reason} {self.to_url(first)}"))
            else:
                folder.add(name, through_link)
            return
        if not self.wanted(rel):
            return
        url = self.to_url(path)
        if not stat.S_ISREG(st.st_mode):
            self.skipped.append(Skipped(url, "not a regular file", Code.IO_NOT_LISTABLE))
        elif not _is_utf8(url):
            self.skipped.append(Skipped(url, "its path is not UTF-8: no URL names it", Code.IO_NAME_NOT_UTF8))
        else:
            self.found.add(url, st, hf_blob=_is_hf_blob(path))


def _as_bytes(names: list[str]) -> pa.Array:
    """Names as the file system's bytes (a name need not be UTF-8), one Arrow array: about 30 bytes a name
    where a Python string costs 60 and its list slot 8."""
    return pa.array([os.fsencode(n) for n in names], pa.binary())


def _listed_names(directory: str) -> Iterator[list[str]]:
    """``directory``'s entry names in order, :data:`_NAMES` of them at a time as Python strings (``OSError``
    as ``os.scandir`` raises it, before the first). A folder of more waits as bytes in Arrow, sorted there:
    in byte order, which for UTF-8 names is Python's."""
    chunks: list[pa.Array] = []
    pending: list[str] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            pending.append(entry.name)
            if len(pending) == _NAMES:
                chunks.append(_as_bytes(pending))
                pending = []
    if not chunks:
        return iter([sorted(pending)])
    chunks.append(_as_bytes(pending))
    names = pa.concat_arrays(chunks)
    return _in_order(names, pc.sort_indices(names))


def _in_order(names: pa.Array, order: pa.Array) -> Iterator[list[str]]:
    for start in range(0, len(order), _NAMES):
        yield [os.fsdecode(n) for n in names.take(order.slice(start, _NAMES)).to_pylist()]


class _Folder:
    """A listed folder's subfolders still to walk, in name order, and which were entered through a symlink.

    The names wait as bytes in Arrow (:func:`_as_bytes`): in a folder of a
    folder per model, such as a Hugging Face cache's ``models--org--name``
    folders, there is a name a model, waiting for most of the walk.
    """

    __slots__ = ("_at", "_chunks", "_found", "_names", "linked", "linked_names", "path")

    def __init__(self, path: str, linked: bool) -> None:
        self.path = path
        self.linked = linked
        self._found: list[str] = []
        self._chunks: list[pa.Array] = []
        self._names: pa.Array | None = None
        self._at = 0
        self.linked_names: set[str] = set()

    def add(self, name: str, through_link: bool) -> None:
        self._found.append(name)
        if len(self._found) == _NAMES:
            self._chunks.append(_as_bytes(self._found))
            self._found = []
        if through_link and not self.linked:
            self.linked_names.add(name)

    def listed(self) -> bool:
        """The folder is listed: its subfolders' names are put away. Whether it has any."""
        if self._found:
            self._chunks.append(_as_bytes(self._found))
            self._found = []
        if not self._chunks:  # most folders of a mirror: a model's, files alone
            return False
        self._names = self._chunks[0] if len(self._chunks) == 1 else pa.concat_arrays(self._chunks)
        self._chunks = []
        return True

    def next_name(self) -> str:
        assert self._names is not None, "taken from a folder with no subfolders"
        name = self._names[self._at].as_py()
        self._at += 1
        return os.fsdecode(name)

    def walked(self) -> bool:
        """Whether every subfolder's name was taken."""
        return self._names is None or self._at >= len(self._names)


_KEYS_PENDING: Final = 4096
"""Directory keys a walk keeps in a Python set before they go into its sorted array."""


class _WalkedDirectories:
    """The directories a walk entered, so that it enters each once, and the path it first entered each by.

    A key per directory, its device and inode as 16 big-endian bytes, in a
    sorted NumPy array (16 bytes a directory: a set of them as integers cost
    about 75, one folder per model making a directory a file) and a set of the
    latest few. Paths are kept only for directories entered through a
    symlink: one entered by its own path from the root is named again from its
    real path (a bind mount, the one directory under two real paths, is then
    named by the path it is seen again under).
    """

    __slots__ = ("_keys", "_linked", "_pending", "_real_root", "_root")

    def __init__(self, root: str, root_st: os.stat_result) -> None:
        self._root = root
        self._real_root = os.path.realpath(root)
        self._keys = np.zeros(0, dtype=_KEY)
        self._pending: set[bytes] = set()
        self._linked: dict[bytes, str] = {}
        self.first_path(root_st, root, False)

    def _entered(self, key: bytes) -> bool:
        if key in self._pending:
            return True
        at = int(np.searchsorted(self._keys, np.array(key, dtype=_KEY)))
        return at < len(self._keys) and bytes(self._keys[at]).ljust(_KEY_BYTES, b"\0") == key

    def _enter(self, key: bytes) -> None:
        self._pending.add(key)
        if len(self._pending) >= _KEYS_PENDING:  # into the sorted keys where they go: a copy of them, no sort
            new = np.sort(np.array(list(self._pending), dtype=_KEY))
            self._keys, self._pending = np.insert(self._keys, np.searchsorted(self._keys, new), new), set()

    def first_path(self, st: os.stat_result, path: str, through_link: bool) -> str | None:
        """None for a directory not entered yet (now taken as entered by ``path``), else the path it was."""
        key = _KEY_FORMAT.pack(st.st_dev, st.st_ino)
        if not self._entered(key):
            self._enter(key)
            if through_link:
                self._linked[key] = path
            return None
        if key in self._linked:
            return self._linked[key]
        real = os.path.realpath(path)
        if real == self._real_root:
            return self._root
        return self._root.rstrip(os.sep) + real[len(self._real_root.rstrip(os.sep)) :]


def _one_path_per_file(found: _Found, urls: pa.ChunkedArray, skipped: list[Skipped]) -> npt.NDArray[np.bool_]:
    """Which files found to list: one path per real file (device and inode), the others named in ``skipped``.

    The kept path is the first in walk order that is not a Hugging Face cache's
    blob (its snapshot path rather than its hash name), the first of all when
    every path is a blob. Files reached under several paths are rare: only
    they cost Python objects.
    """
    n = len(found)
    keep = np.ones(n, np.bool_)
    if n < 2:
        return keep
    dev = np.frombuffer(found.dev, np.uint64)
    ino = np.frombuffer(found.ino, np.uint64)
    order = np.lexsort((ino, dev))
    by_dev, by_ino = dev[order], ino[order]
    same = (by_dev[1:] == by_dev[:-1]) & (by_ino[1:] == by_ino[:-1])
    del by_dev, by_ino
    if not same.any():
        return keep
    blob = np.frombuffer(found.hf_blob, np.uint8)
    run_starts = np.flatnonzero(~np.concatenate(([False], same)))
    run_ends = np.append(run_starts[1:], n)
    for start, end in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
        if end - start < 2:
            continue
        paths = np.sort(order[start:end])
        not_blobs = paths[blob[paths] == 0]
        candidates = not_blobs if len(not_blobs) else paths
        current = _on_refs_main([str(urls[int(i)].as_py()) for i in candidates])
        kept = int(candidates[current or 0])
        kept_url = str(urls[kept].as_py())
        for other in paths.tolist():
            if other != kept:
                keep[other] = False
                skipped.append(Skipped(str(urls[other].as_py()), f"same file as {kept_url}"))
    return keep


def _in_url_order(found: _Found, urls: pa.ChunkedArray, keep: npt.NDArray[np.bool_]) -> ListedFiles:
    """The kept files as the listing's columns, sorted by URL.

    A walk goes depth first, a folder's files before its subfolders', names
    in order: that is URL order when files and folders do not sit side by
    side (one folder of files per model) and no name sorts before ``/``
    (``a-b.gguf`` beside a folder ``a``). The URLs are then kept as they
    were made; otherwise taken in order.
    """
    sizes, mtimes = np.frombuffer(found.size, np.int64), np.frombuffer(found.mtime, np.float64)
    n = len(urls)
    if n < 2 or pc.all(pc.less(urls.slice(0, n - 1), urls.slice(1))).as_py():  # no sort: no index array
        everything = bool(keep.all())
        return ListedFiles.of_columns(
            url=urls if everything else urls.filter(pa.array(keep)),
            size=pa.array(sizes.copy() if everything else sizes[keep]),
            mtime=_timestamps(mtimes if everything else mtimes[keep]),
        )
    order = pc.sort_indices(urls).to_numpy()
    chosen = order[keep[order]]
    return ListedFiles.of_columns(
        url=urls.take(chosen), size=pa.array(sizes[chosen]), mtime=_timestamps(mtimes[chosen])
    )


def _timestamps(seconds: npt.NDArray[np.float64]) -> pa.Array:
    """Modification times (seconds since the epoch, as ``os.stat`` gives them) as UTC microseconds, rounded
    as ``datetime.fromtimestamp`` rounds them (the fraction's microseconds, half to even), so a night's
    stored times compare equal with the last night's."""
    fraction, whole = np.modf(seconds)
    micros = whole.astype(np.int64)
    del whole
    micros *= 1_000_000
    fraction *= 1e6
    micros += np.rint(fraction, out=fraction).astype(np.int64)
    return pa.array(micros, pa.timestamp("us", tz="UTC"))


def unaudited_files(skipped: Iterable[Skipped]) -> ListedFiles:
    """The entries of ``skipped`` that may hide a file (those with a code), as listed files that get a row with
    that error instead of an audit."""
    return ListedFiles.of(
        ListedFile(s.url, error_code=s.code, error_message=s.reason) for s in skipped if s.code is not None
    )


def _unreachable(url: str, exc: OSError) -> Skipped:
    """A wanted entry that ``os.stat`` cannot follow: a broken link or a loop, or a path it may not look up."""
    if exc.errno in (errno.ELOOP, errno.ENOENT):
        why = "symlink loop" if exc.errno == errno.ELOOP else "broken symlink"
        return Skipped(url, f"{why} ({type(exc).__name__})", Code.IO_BROKEN_LINK)
    return Skipped(url, f"cannot look up: {type(exc).__name__}: {exc.strerror}", Code.IO_NOT_LISTABLE)


def _is_utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 (a path's bytes that are not come from ``os.fsdecode`` as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(entry: Skipped) -> Skipped:
    """``entry`` as the tables and the terminal can hold it: a byte of a path that is not UTF-8 as ``\\xff``."""
    if _is_utf8(entry.url) and _is_utf8(entry.reason):
        return entry

    def shown(text: str) -> str:
        try:  # os.fsdecode's escapes back to the bytes they stand for
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate of another origin
            return text.encode("utf-8", "backslashreplace").decode("utf-8")

    return Skipped(shown(entry.url), shown(entry.reason), entry.code)


def _on_refs_main(urls: list[str]) -> int | None:
    """Which of a file's paths lies in the snapshot its Hugging Face cache's ``refs/main`` names (the revision
    ``huggingface_hub`` serves today), when one does: a blob an old snapshot shares is recorded under the current."""
    for i, url in enumerate(urls):
        parts = url.removeprefix("file://").split("/")
        at = next((j for j in range(1, len(parts) - 1) if parts[j] == "snapshots"), None)
        if at is None or not parts[at - 1].startswith("models--"):
            continue
        try:
            with open("/".join([*parts[:at], "refs", "main"]), encoding="utf-8") as ref:
                if ref.read(128).strip() == parts[at + 1]:
                    return i
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _is_hf_blob(path: str) -> bool:
    """Whether ``path`` is a blob of a Hugging Face cache (``models--org--name/blobs/<hash>``)."""
    parent = os.path.dirname(path)
    return os.path.basename(parent) == "blobs" and os.path.basename(os.path.dirname(parent)).startswith("models--")


def _is_within(ancestor: str, path: str) -> bool:
    """Whether ``path`` is ``ancestor`` or below it (a link back up is a loop, not an alias)."""
    return path == ancestor or path.startswith(ancestor.rstrip(os.sep) + os.sep)
