"""The parent side of the render child: start it, feed it, watch it, and stop it at the limits.

This is the only module of gguf-audit's template audit that starts processes.
All templates of a file share one child (:func:`render_all`); a child that a
limit killed is restarted for the templates after the one it died on. The
child gets none of this process's environment (credentials included), only
what Python needs to find jinja2 and this package.
"""

from __future__ import annotations

import atexit
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from gguf_audit.errors import GGUFAuditError
from gguf_audit.templates.conversations import probe_conversations, standard_conversations
from gguf_audit.templates.limits import TemplateLimits, inspect_seconds
from gguf_audit.templates.sandbox.protocol import Answer, Conversation, Job, ProtocolError, encode_request, parse_line

__all__ = [
    "DEFAULT_RENDER_SLOTS",
    "LIMIT_NAMES",
    "RenderSlots",
    "TemplateWorkerError",
    "limit_message",
    "prestart",
    "render_all",
]

#: How long the child may take to start (import jinja2, lock itself down)
#: before the audit gives up. Generous: slow CI hosts are not the template's fault.
_STARTUP_SECONDS: Final = 30.0
#: Time the parent allows past a template's wall limit before killing the child
#: (the child's own timer fires first; this covers writing its answer).
_WALL_GRACE_SECONDS: Final = 1.0


class RenderSlots:
    """How many render children may run at once in this process: threads beyond it wait their turn.

    A batch audits dozens of files on threads; without a bound, each file with
    a template not rendered yet starts its own child at the same moment (75 at
    once were seen on 2 cores). Thread-safe; ``peak`` is the most ever in use.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"RenderSlots needs at least one slot. Got {size!r}.")
        self.size = size
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self.in_use = 0
        self.peak = 0

    def __enter__(self) -> RenderSlots:
        self._slots.acquire()
        with self._lock:
            self.in_use += 1
            self.peak = max(self.peak, self.in_use)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.in_use -= 1
        self._slots.release()


DEFAULT_RENDER_SLOTS: Final = RenderSlots(max(2, os.cpu_count() or 2))
"""The process's render children at once: one per core (two at least)."""


class TemplateWorkerError(GGUFAuditError, RuntimeError):
    """The render child could not be started or spoke nonsense (not the template's fault)."""


#: The limits the child and the runner report, by the name a finding gives them.
LIMIT_NAMES: Final[Mapping[str, str]] = {
    "cpu": "CPU time",
    "wall": "wall-clock",
    "memory": "memory",
    "output": "output size",
    "recursion": "recursion depth",
    "range": "range() size (the sandbox's MAX_RANGE)",
}


def limit_message(key: str, limit: str, limits: TemplateLimits, conversation: str | None) -> str:
    """The finding message for template ``key`` stopped by ``limit`` (a name of LIMIT_NAMES or a death cause)."""
    amount = {
        "cpu": f" of {limits.cpu_seconds:g} s",
        "wall": f" of {limits.wall_seconds:g} s",
        "memory": f" of {limits.memory_bytes} bytes",
        "output": f" of {limits.output_chars} characters",
    }.get(limit, "")
    where = f" on the {conversation!r} conversation" if conversation else ""
    name = LIMIT_NAMES.get(limit)
    if name is None:
        return f"{key}: the render child died ({limit}) while rendering it{where}"
    return f"{key}: rendering hit the {name} limit{amount}{where}"


def _package_root() -> Path:
    # gguf_audit/templates/sandbox/runner.py -> the directory holding gguf_audit/.
    return Path(__file__).resolve().parents[3]


def _child_command() -> list[str]:
    # -S: no site module; _child_env passes this process's sys.path instead (saves ~20 ms).
    return [sys.executable, "-S", "-m", "gguf_audit.templates.sandbox.worker"]


def _child_env() -> dict[str, str]:
    # Only what Python needs to find jinja2 and this package; nothing of the
    # auditor's environment (credentials included) reaches the child.
    path = [str(_package_root()), *(p for p in sys.path if p and isinstance(p, str))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path)), "PYTHONDONTWRITEBYTECODE": "1"}


def _spawn() -> subprocess.Popen[bytes]:
    """Start one render child, its three pipes open."""
    return subprocess.Popen(
        _child_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(_package_root()),
        env=_child_env(),
        close_fds=True,
    )


class _Spare:
    """At most one render child started ahead of need (:func:`prestart`), for the next render to take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._registered = False

    def start(self) -> None:
        with self._lock:
            if self._proc is not None:
                return
            self._proc = _spawn()
            if not self._registered:
                atexit.register(self.stop)
                self._registered = True

    def take(self) -> subprocess.Popen[bytes]:
        """The spare child if it is still alive, else a new one."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            return proc
        if proc is not None:
            _close_pipes(proc)
        return _spawn()

    def stop(self) -> None:
        """Stop a spare nothing took (at exit: a file without a template never needed it)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            _close_pipes(proc)


_SPARE: Final = _Spare()


def prestart() -> None:
    """Start a render child now, for the next render of this process to take.

    A child's start-up (an interpreter, jinja2) then overlaps whatever the
    process does before it renders (a one-file ``inspect`` reads and checks the
    header meanwhile). The child waits for its request before it puts its
    limits on: a late one is as fresh as one started on demand. One not taken
    is stopped at exit.
    """
    _SPARE.start()


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for handle in (proc.stdin, proc.stdout, proc.stderr):
        if handle is not None and not handle.closed:
            handle.close()


@dataclass(slots=True)
class _ChildRun:
    """What one child process said before it finished or was stopped."""

    inspected: list[dict[str, object]]
    """The static verdicts, in the order of the jobs that carried none."""
    results: list[dict[str, object]]
    ready: bool
    stopped: str | None
    """None when the child answered every job; else which limit stopped it."""
    stderr: str


def _death_cause(returncode: int, stderr: str) -> str:
    """Which limit most likely ended a child that died without answering."""
    if "MemoryError" in stderr:
        return "memory"
    if returncode in (-signal.SIGKILL, -signal.SIGXCPU):
        return "cpu"  # RLIMIT_CPU's hard limit kills with SIGKILL (so does the OOM killer)
    if returncode == -signal.SIGSEGV:
        return "recursion"  # the C stack ran out
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _run_child(
    request: bytes, jobs: int, limits: TemplateLimits, file_deadline: float, *, line_seconds: float
) -> _ChildRun:
    """Run one child on ``request``; stop it when a line is later than ``line_seconds`` after the one
    before (a job overstaying its limits) or the file overstays its budget."""
    proc = _SPARE.take()
    inspected: list[dict[str, object]] = []
    results: list[dict[str, object]] = []
    ready = False
    stopped: str | None = None
    out_buffer = bytearray()
    err_tail = bytearray()
    # One answer line holds at most output_chars characters, each at most 12
    # bytes as JSON escapes; more without a newline means the child is broken.
    max_line = 12 * limits.output_chars + 1_000_000
    pending = memoryview(request)
    deadline = time.monotonic() + _STARTUP_SECONDS
    selector = selectors.DefaultSelector()
    try:
        if proc.stdin is None or proc.stdout is None or proc.stderr is None:
            raise TemplateWorkerError("the render child has no pipes")
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        open_reads = 2
        while open_reads and len(results) < jobs:
            now = time.monotonic()
            if now >= file_deadline:
                stopped = "budget"
                break
            remaining = min(deadline, file_deadline) - now
            if remaining <= 0:
                stopped = "wall"
                break
            for key, _events in selector.select(remaining):
                source_file = key.fileobj
                if source_file is proc.stdin:
                    try:
                        written = os.write(proc.stdin.fileno(), pending[:65536])
                    except BlockingIOError:
                        written = 0
                    except BrokenPipeError:
                        written = len(pending)  # the child died; its exit status tells why
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(source_file)
                    open_reads -= 1
                    continue
                if source_file is proc.stderr:
                    err_tail = (err_tail + chunk)[-4000:]
                    continue
                out_buffer += chunk
                while b"\n" in out_buffer:
                    line, _, rest = bytes(out_buffer).partition(b"\n")
                    out_buffer = bytearray(rest)
                    try:
                        message = parse_line(line)
                    except ProtocolError as exc:
                        raise TemplateWorkerError(str(exc)) from exc
                    if not ready:
                        if message.get("ready") is not True:
                            raise TemplateWorkerError(f"the render child's first line was {line[:120]!r}")
                        ready = True
                    elif "inspected" in message:
                        verdict = message["inspected"]
                        if not isinstance(verdict, dict) or results:
                            raise TemplateWorkerError(f"the render child wrote {line[:120]!r} out of turn")
                        inspected.append(verdict)
                    else:
                        results.append(message)
                    deadline = time.monotonic() + line_seconds
                if len(out_buffer) > max_line:
                    stopped = "output"
                    break
            if stopped:
                break
    finally:
        selector.close()
        # Every answer in, the child has only its interpreter's teardown left (20 to 30 ms of jinja2 and an
        # audit hook): stopped rather than waited for. One stopped early has nothing more to say either.
        proc.kill()
        try:
            returncode = proc.wait(timeout=_WALL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            # Every answer is in; a child that does not exit promptly is not waited for.
            proc.kill()
            returncode = proc.wait()
        finally:
            _close_pipes(proc)
    stderr = err_tail.decode("utf-8", "replace")
    if stopped is None and len(results) < jobs:
        stopped = _death_cause(returncode, stderr)
    return _ChildRun(inspected, results, ready, stopped, stderr)


def render_all(
    sources: Sequence[str],
    *,
    bos_token: str,
    eos_token: str,
    limits: TemplateLimits,
    slots: RenderSlots = DEFAULT_RENDER_SLOTS,
) -> list[Answer]:
    """Inspect and render each source in one child, once one of ``slots`` is free (see :func:`_render_all`)."""
    with slots:
        return _render_all(sources, bos_token=bos_token, eos_token=eos_token, limits=limits)


def _render_all(sources: Sequence[str], *, bos_token: str, eos_token: str, limits: TemplateLimits) -> list[Answer]:
    """Inspect each source in one child, then render those the inspection passes (the first
    ``limits.max_renders``); restart the child only after a limit killed it.

    Returns one answer per source, in order, each with its ``static`` verdict
    (None for a source no child reached): the child's answer, one saying which
    limit killed the child on it, or ``skipped``. A source whose inspection
    killed the child gets ``{"limit": cause}`` as its verdict and is not
    rendered. Once the file's budget (``limits.file_seconds`` of wall clock for
    the whole set) is spent, the child is stopped and every source not answered
    yet gets ``{"status": "budget"}``. Raises :class:`TemplateWorkerError` when
    the child does not start or answers nonsense.
    """
    file_deadline = time.monotonic() + limits.file_seconds
    conversations: list[Conversation] = [
        {"name": name, "context": ctx} for name, ctx in standard_conversations(bos_token, eos_token)
    ]
    conversations += [
        {"name": name, "context": ctx, "probe": True} for name, ctx in probe_conversations(bos_token, eos_token)
    ]
    # A line may come as late as the longest inspection or a render's wall limit allows, plus the grace.
    longest = max((len(source) for source in sources), default=0)
    line_seconds = max(inspect_seconds(longest), limits.wall_seconds) + _WALL_GRACE_SECONDS
    verdicts: list[dict[str, object] | None] = [None] * len(sources)
    results: list[Answer] = []
    renders_used = 0
    while len(results) < len(sources):
        todo = range(len(results), len(sources))
        if time.monotonic() >= file_deadline:
            results += [{"status": "budget"}] * len(todo)
            break
        jobs: list[Job] = []
        for i in todo:
            known = verdicts[i]
            jobs.append({"source": sources[i]} if known is None else {"source": sources[i], "static": known})
        limit_fields = {
            "cpu_seconds": limits.cpu_seconds,
            "wall_seconds": limits.wall_seconds,
            "memory_bytes": limits.memory_bytes,
            "output_chars": limits.output_chars,
            "max_renders": max(0, limits.max_renders - renders_used),
        }
        request = encode_request(limit_fields, conversations, jobs)
        run = _run_child(request, len(jobs), limits, file_deadline, line_seconds=line_seconds)
        uninspected = [i for i in todo if verdicts[i] is None]
        for i, verdict in zip(uninspected, run.inspected, strict=False):
            verdicts[i] = verdict
        answers = [_as_answer(r) for r in run.results]
        renders_used += sum(1 for a in answers if a.get("status") != "skipped")
        results += answers
        if run.stopped == "budget":
            results += [{"status": "budget"}] * (len(sources) - len(results))
            break
        if not run.ready:
            detail = run.stderr.strip().splitlines()[-1:] or [run.stopped or "no output"]
            raise TemplateWorkerError(f"the render child did not start: {detail[0][:300]}")
        if run.stopped is not None and len(results) < len(sources):
            if len(run.inspected) < len(uninspected):
                # It died inspecting this one: its verdict is the limit, and it is not rendered.
                verdicts[uninspected[len(run.inspected)]] = {"limit": run.stopped}
            else:
                # The job the child was rendering when it died is the one to blame.
                results.append({"status": "limit", "limit": run.stopped, "conversation": None, "killed": True})
                renders_used += 1
    return [{**answer, "static": verdict} for answer, verdict in zip(results, verdicts, strict=True)]


def _as_answer(message: Mapping[str, object]) -> Answer:
    """A child's answer line, typed: what the audit reads of it is checked field by field there."""
    return cast(Answer, dict(message))
