"""The writer's lease on an output: one scan or vacuum writes to an ``OUT`` at a time, and none harms another.

A scan commits a night table by table, ``runs`` last; anything else that
writes to the output in that window (a second scan's recovery, a vacuum) could
roll the night back under it. So every writer first takes the output's lease,
holds it while it runs and gives it back at the end; a second writer finding a
live lease waits for it (up to ``wait_s``) or stops with :class:`LeaseHeld`,
one line naming the holder.

The protocol, on any store that can create an object only if it is absent:

- The lease is a series of generations, ``OUT/_lease/<generation>.json``
  (20 zero-padded digits, so names sort as numbers). The highest generation is
  the lease's state: ``owner`` (a random token), ``host``, ``pid``,
  ``purpose`` (``scan <run>`` or ``vacuum``), ``since``, ``heartbeat`` (UTC,
  ISO 8601), ``expiry_s`` and ``released``.
- **Acquire**: read the highest generation ``g``. If there is none, or it is
  released, or it has expired (its heartbeat is older than its ``expiry_s``;
  or its holder ran in this process space and its pid is gone), create ``g + 1``
  atomically: a hard link of a written temporary file on a local disk (fails
  if the name exists), a put with ``If-None-Match: *`` on S3 (exclusive
  ``xb`` mode elsewhere; a store with neither gets a write-then-read-back,
  best effort, and a warning). Of writers racing for ``g + 1`` exactly one wins;
  the others read it and wait or stop.
- **Heartbeat**: a daemon thread rewrites the holder's own generation with a
  fresh ``heartbeat`` every ``expiry_s / 4`` seconds. Before each write it
  looks for a higher generation: one exists only if another writer found this
  lease expired (the holder was paused or cut off for longer than
  ``expiry_s``) and took it, and then this holder has *lost* the lease.
- **Check**: a scan calls :meth:`Lease.check` in each table commit, after the
  table's snapshot is read; a lost lease raises :class:`LeaseLost` and the scan
  records nothing. The check alone leaves a window (a holder paused after it),
  closed by fencing in the tables themselves: each commit carries the lease's
  generation as a Delta application transaction, and a writer taking over an
  expired lease first commits its own to every table, so the paused holder's
  commit fails delta-rs's conflict check
  (:meth:`~gguf_audit.pipelines.store.delta.DeltaTables.fence_all`).
- **Release**: the holder rewrites its generation with ``released: true`` and
  deletes the generations below it. Generations are never reused, so a late
  heartbeat of a lost holder can only rewrite a generation nobody reads.

A writer that takes over an expired lease then rolls back the commits its
holder left half done (:meth:`~gguf_audit.pipelines.store.output.Output.recover`):
the only runs it rolls back are those of a holder that stopped heartbeating.
Expiry compares clocks of different hosts: keep them within a small fraction
of ``expiry_s`` (NTP does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import fsspec

from gguf_audit.errors import GGUFAuditError

__all__ = [
    "DEFAULT_EXPIRY_S",
    "LEASE_DIR",
    "Lease",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LeaseState",
    "acquire_lease",
    "process_space",
    "read_lease",
]

log = logging.getLogger(__name__)

LEASE_DIR: Final = "_lease"
DEFAULT_EXPIRY_S: Final = 120.0
"""Seconds without a heartbeat after which a lease is another writer's to take: long enough that a busy
store or a slow garbage collection never loses a live scan its lease (it heartbeats four times per expiry)."""
_DIGITS: Final = 20


class LeaseError(GGUFAuditError, OSError):
    """The output's lease stops this writer; nothing was written (exit status 2)."""


class LeaseHeld(LeaseError):
    """Another writer holds a live lease on the output."""


class LeaseLost(LeaseError):
    """This writer's lease expired and another writer took it: it must record nothing."""


@dataclass(frozen=True, slots=True)
class LeaseState:
    """One generation of the lease, as its JSON says."""

    generation: int
    owner: str
    host: str
    pid: int
    purpose: str
    since: datetime
    heartbeat: datetime
    expiry_s: float
    released: bool
    space: str = ""
    """The holder's process space (:func:`process_space`): where its ``pid`` can be looked up."""

    def age_s(self, now: datetime | None = None) -> float:
        """Seconds since the holder's last heartbeat."""
        return ((now or datetime.now(UTC)) - self.heartbeat).total_seconds()

    def live(self, now: datetime | None = None) -> bool:
        """Whether a writer must respect it: not released, heartbeat within ``expiry_s``, holder not known dead."""
        if self.released or self.age_s(now) > self.expiry_s:
            return False
        # A pid means something only in the holder's own process space (the same host, boot and pid namespace:
        # two containers can share a host name and not their pids).
        return not (self.space == process_space() and not _pid_alive(self.pid))

    def describe(self) -> str:
        """``scan R (host h, pid 12, since ...)`` for messages."""
        return f"{self.purpose} (host {self.host}, pid {self.pid}, since {self.since:%Y-%m-%d %H:%M:%S} UTC)"

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "owner": self.owner,
                "host": self.host,
                "pid": self.pid,
                "purpose": self.purpose,
                "since": self.since.isoformat(),
                "heartbeat": self.heartbeat.isoformat(),
                "expiry_s": self.expiry_s,
                "released": self.released,
                "space": self.space,
            }
        ).encode()


def process_space() -> str:
    """This process's host name, boot and pid namespace: a pid names the same process only within one."""
    parts = [socket.gethostname()]
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:  # not Linux: the host name alone
        pass
    return "|".join(parts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except (OSError, OverflowError, ValueError):
        return True  # cannot tell: respect the lease
    return True


def _parse_state(generation: int, raw: bytes) -> LeaseState | None:
    """A generation's state, or None for one that is unreadable (a torn write counts as expired long ago)."""
    try:
        data: Any = json.loads(raw)
        return LeaseState(
            generation,
            str(data["owner"]),
            str(data["host"]),
            int(data["pid"]),
            str(data["purpose"]),
            datetime.fromisoformat(str(data["since"])),
            datetime.fromisoformat(str(data["heartbeat"])),
            float(data["expiry_s"]),
            bool(data["released"]),
            str(data.get("space", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None


class _Store:
    """The lease's files under ``<root>/_lease`` through one fsspec filesystem."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, local: bool) -> None:
        self.fs = fs
        self.base = f"{root}/{LEASE_DIR}"
        self.local = local
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.s3 = protocol in ("s3", "s3a")

    def path(self, generation: int) -> str:
        return f"{self.base}/{generation:0{_DIGITS}d}.json"

    def generations(self) -> list[int]:
        """Every generation present, ascending (a fresh listing: no cached directory)."""
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(self.base)
        try:
            names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.base, detail=False)]
        except FileNotFoundError:
            return []
        stems = (n.removesuffix(".json") for n in names if n.endswith(".json"))
        return sorted(int(s) for s in stems if len(s) == _DIGITS and s.isdigit())

    def read(self, generation: int) -> LeaseState | None:
        try:
            raw = self.fs.cat_file(self.path(generation))
        except FileNotFoundError:
            return None
        return _parse_state(generation, raw)

    def create(self, generation: int, data: bytes) -> bool:
        """Write generation ``generation`` only if it does not exist; whether this call created it."""
        path = self.path(generation)
        if self.local:
            os.makedirs(self.base, exist_ok=True)
            tmp = f"{self.base}/.{generation:0{_DIGITS}d}.{secrets.token_hex(6)}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if the name exists: the whole file appears at once, or nothing
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        try:
            if self.s3:
                self.fs.pipe_file(path, data, mode="create")  # put_object(IfNoneMatch="*")
            else:
                try:
                    with self.fs.open(path, "xb") as f:
                        f.write(data)
                except (ValueError, NotImplementedError):
                    return self._create_checked(path, data)
        except FileExistsError:
            return False
        except OSError:
            # A store may answer the failed condition with another error (412 without its condition):
            # the generation exists and is someone else's, or the error stands.
            state = self.read(generation)
            if state is not None and state.owner != _parse_owner(data):
                return False
            raise
        return True

    def _create_checked(self, path: str, data: bytes) -> bool:
        """For a store with no exclusive create: write if absent, then read back whose it is (best effort)."""
        log.warning("the output's store cannot create an object only if absent: the lease is best effort there")
        if self.fs.exists(path):
            return False
        self.fs.pipe_file(path, data)
        time.sleep(0.5)  # let a racing writer's put land, then see whose survived
        return bool(self.fs.cat_file(path) == data)

    def overwrite(self, generation: int, data: bytes) -> None:
        """Replace the holder's own generation (a heartbeat or the release): atomic for readers."""
        path = self.path(generation)
        if self.local:
            tmp = f"{self.base}/.{generation:0{_DIGITS}d}.{secrets.token_hex(6)}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            return
        self.fs.pipe_file(path, data)

    def remove(self, generation: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(generation))


def _parse_owner(data: bytes) -> str:
    state = _parse_state(0, data)
    return "" if state is None else state.owner


def read_lease(fs: fsspec.AbstractFileSystem, root: str, *, local: bool) -> LeaseState | None:
    """The lease's current state (its highest generation), or None when no writer ever took it."""
    store = _Store(fs, root, local)
    gens = store.generations()
    return store.read(gens[-1]) if gens else None


class Lease:
    """A held lease: heartbeats in a daemon thread until :meth:`release`; :meth:`check` before each commit."""

    def __init__(self, store: _Store, state: LeaseState, taken_over: LeaseState | None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.state = state
        self.taken_over = taken_over
        """The expired lease this one replaced (its holder's half-done commits are now this writer's to undo)."""
        self._lost: LeaseState | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="gguf-audit-lease", daemon=True)
        self._thread.start()

    @property
    def interval_s(self) -> float:
        return max(0.05, self.state.expiry_s / 4)

    def _successor(self) -> LeaseState | None:
        """A generation above this one (another writer took the lease), or None."""
        gens = [g for g in self._store.generations() if g > self.state.generation]
        if not gens:
            return None
        return self._store.read(gens[-1]) or LeaseState(
            gens[-1], "?", "?", 0, "another writer", self.state.since, self.state.since, 0.0, False
        )

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with self._lock:
                    if self._lost is not None or self._stop.is_set():
                        return
                    successor = self._successor()
                    if successor is not None:
                        self._lost = successor
                        log.error(
                            "the output's lease was taken by %s: this writer will record nothing", successor.describe()
                        )
                        return
                    self.state = _with(self.state, heartbeat=datetime.now(UTC))
                    self._store.overwrite(self.state.generation, self.state.to_json())
            except OSError as exc:  # a store hiccup: the next beat tries again, expiry allows three misses
                log.warning("could not renew the output's lease: %s", exc)

    def check(self) -> None:
        """Raise :class:`LeaseLost` when another writer has taken this lease (it expired)."""
        with self._lock:
            if self._lost is None:
                self._lost = self._successor()
            lost = self._lost
        if lost is not None:
            raise LeaseLost(
                f"this writer's lease on the output expired (no heartbeat for {self.state.expiry_s:g} s: was the "
                f"process paused?) and {lost.describe()} took it; nothing was recorded"
            )

    def release(self, *, failing: bool = False) -> None:
        """Stop heartbeating and give the lease back (a lost lease is left to its new holder).

        ``failing``: the holder is stopping on an error that it reports itself (a full disk, a lost store), so a
        lease that cannot be given back for the same cause is not a second message (it expires by itself).
        """
        self._stop.set()
        self._thread.join(timeout=max(5.0, self.interval_s * 2))
        with self._lock:
            if self._lost is not None or self._successor() is not None:
                return
            self.state = _with(self.state, released=True, heartbeat=datetime.now(UTC))
            try:
                self._store.overwrite(self.state.generation, self.state.to_json())
            except OSError as exc:  # the lease then expires by itself
                log.log(logging.DEBUG if failing else logging.WARNING, "could not release the output's lease: %s", exc)
                return
        for g in self._store.generations():
            if g < self.state.generation:
                with contextlib.suppress(OSError):
                    self._store.remove(g)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.release(failing=kind is not None)


def _with(state: LeaseState, **changes: Any) -> LeaseState:
    return replace(state, **changes)


def acquire_lease(
    fs: fsspec.AbstractFileSystem,
    root: str,
    *,
    local: bool,
    purpose: str,
    where: str,
    wait_s: float = 0.0,
    expiry_s: float = DEFAULT_EXPIRY_S,
) -> Lease:
    """Take the output's lease (see the module docs), waiting up to ``wait_s`` for a live holder.

    ``where`` names the output in the message of :class:`LeaseHeld`.
    """
    if not expiry_s > 0:
        raise ValueError(f"the lease expiry must be positive seconds. Got {expiry_s!r}.")
    store = _Store(fs, root, local)
    deadline = time.monotonic() + max(0.0, wait_s)
    owner = secrets.token_hex(16)
    while True:
        gens = store.generations()
        current = store.read(gens[-1]) if gens else None
        top = gens[-1] if gens else 0
        if current is None or not current.live():
            now = datetime.now(UTC)
            state = LeaseState(
                top + 1, owner, socket.gethostname(), os.getpid(), purpose, now, now, expiry_s, False, process_space()
            )
            if store.create(top + 1, state.to_json()):
                expired = current if current is not None and not current.released else None
                return Lease(store, state, expired)
            continue  # another writer took top + 1 first: look at it
        if time.monotonic() >= deadline:
            expires = current.heartbeat.timestamp() + current.expiry_s
            raise LeaseHeld(
                f"{where} is being written by {current.describe()}, last heartbeat {current.age_s():.0f} s ago; "
                f"wait for it to finish (--lease-wait SECONDS), or if that process is gone, run again after "
                f"{datetime.fromtimestamp(expires, UTC):%H:%M:%S} UTC, when its lease expires"
            )
        time.sleep(min(1.0, max(0.05, current.expiry_s / 20), max(0.05, deadline - time.monotonic())))
