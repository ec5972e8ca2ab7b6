"""The child process that renders chat templates for :mod:`gguf_audit.templates.sandbox.runner`.

Run as ``python -m gguf_audit.templates.sandbox.worker``. It reads one JSON
request on stdin (limits, the conversations, the templates), puts hard limits
on itself, parses and inspects every template (a line each: the parser is what
a hostile megabyte of Jinja attacks, so it runs here, not in the auditor), then
renders those the inspection passes (a line each), each line flushed as it is
done, so that the parent knows which template was being inspected or rendered
when the child had to be killed and can restart it for the rest (the lines are
defined in :mod:`~gguf_audit.templates.sandbox.protocol`).

Limits, each aimed at one way a hostile template can hurt the auditor:

* CPU: ``ITIMER_PROF`` per template (a Python-level ``while`` of nested loops
  stops cleanly); ``RLIMIT_CPU`` behind it, whose hard limit makes the kernel
  kill a child stuck in C code (``10 ** 10 ** 9``).
* Wall clock: ``ITIMER_REAL`` per template; the parent's own deadline kills the
  child if that signal cannot be delivered.
* Memory: ``RLIMIT_AS``, so ``'A' * 10 ** 10`` raises ``MemoryError`` instead
  of swapping the host to death.
* Output: the template is rendered with ``Template.generate`` and the chunks
  counted, so a loop printing forever stops at ``output_chars``.
* No files, processes or sockets: ``RLIMIT_FSIZE``/``RLIMIT_NPROC`` of 0 and an
  audit hook, installed once jinja2 and everything a render needs is imported,
  that refuses ``open``, new imports, ``os.*``, ``subprocess.*``, ``socket.*``.

The Jinja environment is transformers' (:mod:`~gguf_audit.templates.environment`).
Of gguf_audit this module imports only the environment, the limits, the static
inspection and the protocol, to keep the child's start-up short.
"""

from __future__ import annotations

import contextlib
import math
import resource
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, Final

import jinja2

from gguf_audit.templates.environment import AuditingSandbox, TemplateRaisedError, make_environment
from gguf_audit.templates.inspect.verdict import StaticVerdict, static_verdict
from gguf_audit.templates.limits import inspect_seconds
from gguf_audit.templates.sandbox.protocol import Answer, Attempt, Inspected, Ready, encode_line, parse_request

__all__ = ["main"]

#: Rendered text kept for the tail; the parent slices it again.
_ERROR_CHARS: Final = 300
#: Audit events refused once the child is locked down (exact names).
_BLOCKED_EVENTS: Final = frozenset(
    {"open", "import", "builtins.input", "builtins.breakpoint", "code.interact", "pty.spawn"}
)
#: Audit events refused by prefix: the file system, processes, the network,
#: native code.
_BLOCKED_PREFIXES: Final = (
    "os.",
    "subprocess.",
    "socket.",
    "shutil.",
    "ctypes.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "telnetlib.",
    "poplib.",
    "imaplib.",
    "nntplib.",
    "webbrowser.",
    "fcntl.",
    "mmap.",
    "glob.",
    "sqlite3.",
    "tempfile.",
    "syslog.",
)


class _LimitHit(BaseException):
    """A per-template limit fired. A BaseException so no ``except Exception`` swallows it."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


class _Blocked(BaseException):
    """The audit hook refused an operation the renderer never needs."""

    def __init__(self, event: str) -> None:
        super().__init__(event)
        self.event = event


# --- the locked-down child ---------------------------------------------------

_armed = False
_locked = False
_blocked_events: list[str] = []


def _on_limit_signal(signum: int, frame: FrameType | None) -> None:
    global _armed
    if not _armed:
        return
    # One shot: a second signal arriving while the first is being handled
    # must not raise out of the handler's own except clause.
    _armed = False
    raise _LimitHit("wall" if signum == signal.SIGALRM else "cpu")


def _audit_hook(event: str, args: tuple[object, ...]) -> None:
    if not _locked:
        return
    if event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES):
        if len(_blocked_events) < 20:
            _blocked_events.append(event)
        raise _Blocked(event)


def _arm(cpu_seconds: float, wall_seconds: float, cpu_hard: int) -> None:
    global _armed
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        cpu_hard = min(cpu_hard, hard)
    # RLIMIT_CPU counts whole seconds; the interval timer below is the precise
    # limit, this one the backstop for code that never returns to Python.
    soft = min(cpu_hard, math.ceil(_cpu_used() + cpu_seconds) + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    _armed = True
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, wall_seconds)


def _disarm() -> None:
    global _armed
    _armed = False
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _set_limit(which: int, value: int) -> None:
    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    # A limit the platform will not lower still leaves the audit hook and the
    # other limits in place.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(which, (value, value))


def _apply_process_limits(memory_bytes: int, cpu_hard: int) -> None:
    _set_limit(resource.RLIMIT_CORE, 0)  # SIGXCPU would otherwise dump core into the cwd
    _set_limit(resource.RLIMIT_FSIZE, 0)
    _set_limit(resource.RLIMIT_NPROC, 0)  # no fork: ignored for root, the audit hook still refuses it
    _set_limit(resource.RLIMIT_AS, memory_bytes)
    _set_limit(resource.RLIMIT_CPU, cpu_hard)


#: Filters and globals whose jinja2/markupsafe code imports a module the first
#: time it runs (``wordwrap`` imports textwrap, ``striptags`` html, ``pprint``
#: pprint, ``lipsum`` jinja2.constants): run once before imports are refused, so
#: a template using them is not taken for one attempting an import.
_LAZY_IMPORTERS: Final = (
    "{{ 'a b c'|wordwrap(2) }}{{ '<b>x</b>'|striptags }}{{ 'x'|pprint }}{{ lipsum(1, false, 2, 3) }}"
    "{{ 'see http://a.b'|urlize }}{{ 1234|filesizeformat }}{{ 'x'|urlencode }}{{ [1]|random }}"
    "{{ {'a': 1}|xmlattr }}{{ 'abcdefgh'|truncate(5) }}{{ 'a'|center(3) }}{{ 'a'|indent(2) }}{{ 'a'|title }}"
    "{{ 'a'|wordcount }}{{ 'a'|forceescape }}{{ [1]|sum }}{{ [1, 1]|unique|list }}{{ [1]|map('string')|list }}"
    "{{ '%s'|format(1) }}{{ 3|round }}{{ [[1]]|groupby(0)|list }}{{ {'a': 1}|dictsort }}{{ 'a'|tojson }}"
)


def _warm_up(env: jinja2.Environment) -> None:
    """Import everything a render may import lazily, before imports are refused."""
    "".join(env.from_string(_LAZY_IMPORTERS).generate())
    template = env.from_string(
        "{% for m in messages %}{{ m.content|trim|tojson }}{% generation %}x{% endgeneration %}"
        "{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ strftime_now('%d %b %Y') }}"
        "{{ raise_exception('warm-up') }}"
    )
    # The point of the raise: jinja2.debug is imported on the first template error.
    with contextlib.suppress(TemplateRaisedError):
        "".join(template.generate(messages=[{"role": "user", "content": " hi "}]))
    # The inspection once, and a syntax error, for whatever they compile or import on first use.
    static_verdict("{% for m in messages %}{{ m.content|trim }}{% if loop.last %}{{ x.y(1) }}{% endif %}{% endfor %}")
    static_verdict("{% for %}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_ERROR_CHARS]


def _render(template: jinja2.Template, context: Mapping[str, object], output_chars: int) -> tuple[str, bool]:
    """Render by streaming; stop once the output passes ``output_chars``."""
    parts: list[str] = []
    total = 0
    stream: Iterator[str] = template.generate(**context)
    try:
        for chunk in stream:
            total += len(chunk)
            if total > output_chars:
                keep = len(chunk) - (total - output_chars)
                parts.append(chunk[:keep])
                return "".join(parts), True
            parts.append(chunk)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return "".join(parts), False


def _run_job(
    env: AuditingSandbox,
    source: str,
    conversations: Sequence[tuple[str, Mapping[str, object], bool]],
    limits: Mapping[str, Any],
    cpu_hard: int,
) -> Answer:
    env.refused.clear()
    _blocked_events.clear()
    attempts: list[Attempt] = []
    result: Answer
    current = ""
    try:
        _arm(float(limits["cpu_seconds"]), float(limits["wall_seconds"]), cpu_hard)
        try:
            template = env.from_string(source)
        except RecursionError:
            return {"status": "limit", "limit": "recursion", "conversation": ""}
        except jinja2.TemplateError as exc:
            return {"status": "compile_error", "error": _one_line(f"{type(exc).__name__}: {exc}")}
        result = {"status": "error", "attempts": attempts}
        for name, context, probe in conversations:
            if probe:
                continue
            current = name
            try:
                text, truncated = _render(template, context, int(limits["output_chars"]))
            except OverflowError as exc:
                if "MAX_RANGE" in str(exc):
                    return _finish(env, {"status": "limit", "limit": "range", "conversation": name})
                attempts.append({"conversation": name, "error": _one_line(f"OverflowError: {exc}")})
                continue
            except Exception as exc:
                if isinstance(exc, MemoryError | RecursionError):
                    raise
                attempts.append({"conversation": name, "error": _one_line(f"{type(exc).__name__}: {exc}")})
                continue
            if truncated:
                return _finish(env, {"status": "limit", "limit": "output", "conversation": name})
            result = {"status": "ok", "conversation": name, "rendered": text, "attempts": attempts}
            break
        # The probes: what runtimes send beyond the standard conversations. Their
        # errors are ignored; a limit, a blocked event or a refused attribute is not.
        probes = 0
        for name, context, probe in conversations:
            if not probe:
                continue
            current = name
            try:
                _text, truncated = _render(template, context, int(limits["output_chars"]))
            except OverflowError as exc:
                if "MAX_RANGE" in str(exc):
                    return _finish(env, {"status": "limit", "limit": "range", "conversation": name})
                continue
            except Exception as exc:
                if isinstance(exc, MemoryError | RecursionError):
                    raise
                continue
            if truncated:
                return _finish(env, {"status": "limit", "limit": "output", "conversation": name})
            probes += 1
        result["probes"] = probes
    except _LimitHit as hit:
        result = {"status": "limit", "limit": hit.limit, "conversation": current}
    except MemoryError:
        result = {"status": "limit", "limit": "memory", "conversation": current}
    except RecursionError:
        result = {"status": "limit", "limit": "recursion", "conversation": current}
    except _Blocked as blocked:
        result = {"status": "blocked", "event": blocked.event, "conversation": current}
    finally:
        _disarm()
    return _finish(env, result)


def _inspect_job(source: str, cpu_hard: int) -> StaticVerdict:
    """Parse and inspect one template under an allowance of its own (see ``inspect_seconds``)."""
    allowance = inspect_seconds(len(source))
    try:
        _arm(allowance, allowance, cpu_hard)
        return static_verdict(source)
    except _LimitHit as hit:
        return {"limit": hit.limit}
    except MemoryError:
        return {"limit": "memory"}
    except _Blocked as blocked:
        return {"refused": f"inspecting it needed {blocked.event}, which the child refuses"}
    finally:
        _disarm()


def _finish(env: AuditingSandbox, result: Answer) -> Answer:
    """The answer with what the sandbox refused and the audit hook blocked during the job."""
    result["refused"] = list(env.refused)
    result["blocked_events"] = list(_blocked_events)
    return result


def _emit(message: Ready | Inspected | Answer) -> None:
    sys.stdout.write(encode_line(message))
    sys.stdout.flush()


def main() -> int:
    """Render every job of the request on stdin; one JSON line per job on stdout."""
    global _locked
    # The environment and its warm-up run only our own templates: done before the request is read, so a child
    # started ahead of need (runner.prestart) has them ready when it comes. Nothing of the request runs before
    # the limits and the audit hook below are on.
    env = make_environment()
    _warm_up(env)
    limits, conversations, jobs = parse_request(sys.stdin.buffer.read())
    cpu_seconds = float(limits["cpu_seconds"])
    to_inspect = [job["source"] for job in jobs if "static" not in job]
    # Whole-process CPU backstop: every template's share plus start-up slack.
    inspecting = sum(inspect_seconds(len(source)) for source in to_inspect)
    cpu_hard = math.ceil(_cpu_used() + len(jobs) * (cpu_seconds + 1.0) + inspecting + 2.0)
    _apply_process_limits(int(limits["memory_bytes"]), cpu_hard)
    signal.signal(signal.SIGPROF, _on_limit_signal)
    signal.signal(signal.SIGALRM, _on_limit_signal)
    signal.signal(signal.SIGXCPU, _on_limit_signal)
    sys.addaudithook(_audit_hook)
    _locked = True
    _emit({"ready": True, "cpu_seconds": _cpu_used()})
    verdicts: list[dict[str, object]] = []
    for job in jobs:
        known = job.get("static")
        if known is None:
            verdict = dict(_inspect_job(job["source"], cpu_hard))
            _emit({"inspected": verdict})
            known = verdict
        verdicts.append(known)
    renders_left = int(limits["max_renders"])
    for job, verdict in zip(jobs, verdicts, strict=True):
        if "unsafe" not in verdict:
            _emit({"status": "skipped", "why": "static"})
        elif renders_left <= 0:
            _emit({"status": "skipped", "why": "max_renders"})
        else:
            renders_left -= 1
            _emit(_run_job(env, job["source"], conversations, limits, cpu_hard))
    return 0


if __name__ == "__main__":
    sys.exit(main())
