"""The render child's line protocol: one JSON request on stdin, JSON lines on stdout.

Both ends import this module, so the fields are defined once: the runner
encodes the :class:`Request` and parses the lines, the child parses the
request and writes its :class:`Ready` line, then one :class:`Inspected` line
per job it inspects (every job not carrying a verdict already, in order), then
one :class:`Answer` per job, each flushed as it is done (so that the parent
knows which template was being inspected or rendered when the child had to be
killed). Lines are ASCII JSON
(``ensure_ascii``: rendered text may hold lone surrogates from odd metadata).
It imports only the standard library: the child starts with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "Answer",
    "Attempt",
    "Conversation",
    "Inspected",
    "Job",
    "ProtocolError",
    "Ready",
    "Request",
    "Status",
    "encode_line",
    "encode_request",
    "parse_line",
    "parse_request",
]


class Conversation(TypedDict):
    """One standard conversation: its name and the render context."""

    name: str
    context: dict[str, object]
    probe: NotRequired[bool]
    """A probe is rendered after the standard conversations, whatever they did; its errors are ignored."""


class Job(TypedDict):
    """One template to inspect and render."""

    source: str
    static: NotRequired[dict[str, object]]
    """Its static verdict when an earlier child gave it (not inspected again); see
    :mod:`gguf_audit.templates.inspect.verdict` for the shapes."""


class Request(TypedDict):
    """What the runner writes to the child's stdin, once."""

    limits: dict[str, float]
    """``cpu_seconds``, ``wall_seconds``, ``memory_bytes``, ``output_chars`` (see TemplateLimits), and
    ``max_renders``: how many of the jobs the child may render (those the inspection allows, in order)."""
    conversations: list[Conversation]
    jobs: list[Job]


class Ready(TypedDict):
    """The child's first line: it is locked down and about to render."""

    ready: Literal[True]
    cpu_seconds: float
    """CPU time the start-up took."""


class Inspected(TypedDict):
    """One job's static verdict, written once the child has parsed and inspected it, before any render."""

    inspected: dict[str, object]


class Attempt(TypedDict):
    """A conversation the template failed to render."""

    conversation: str
    error: str


Status = Literal["ok", "limit", "error", "compile_error", "blocked", "skipped", "budget"]
"""``ok``: rendered; ``limit``: a limit stopped it; ``error``: no conversation rendered;
``compile_error``: it does not compile; ``blocked``: the audit hook refused an operation;
``skipped``: not rendered (``why``: the inspection did not pass it, or ``max_renders`` were spent);
``budget`` (the runner's): not rendered, the file's render budget was spent."""


class Answer(TypedDict, total=False):
    """The answer for one job; ``status`` says which of the other fields it has."""

    status: Status
    conversation: str | None
    """The conversation rendered (``ok``) or being rendered when it stopped (``limit``, ``blocked``)."""
    rendered: str
    """``ok``: the render, at most ``output_chars`` long."""
    attempts: list[Attempt]
    """``ok``, ``error``: the conversations tried before, and why each failed."""
    probes: int
    """``ok``, ``error``: how many probe conversations rendered without an error."""
    error: str
    """``compile_error``: why."""
    limit: str
    """``limit``: ``cpu``, ``wall``, ``memory``, ``output``, ``recursion`` or ``range``; the runner
    adds the cause of a child's death (``signal SIGKILL``, ``exit status 1``)."""
    event: str
    """``blocked``: the audit event refused."""
    refused: list[str]
    """Private or internal attributes the sandbox refused during the job (every answer)."""
    blocked_events: list[str]
    """Audit events refused during the job (every answer)."""
    why: Literal["static", "max_renders"]
    """``skipped``: why the job was not rendered."""
    killed: bool
    """Added by the runner: no answer came, the child was stopped on this job."""
    static: dict[str, object] | None
    """Added by the runner: the job's static verdict (None when no child reached it)."""


class ProtocolError(ValueError):
    """A line that is not a JSON object."""


def encode_request(limits: Mapping[str, float], conversations: Sequence[Conversation], jobs: Sequence[Job]) -> bytes:
    """The request for inspecting and rendering ``jobs``, as the child's stdin."""
    request: Request = {"limits": dict(limits), "conversations": list(conversations), "jobs": list(jobs)}
    return json.dumps(request, ensure_ascii=True).encode("ascii")


def parse_request(
    raw: bytes,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, object], bool]], list[dict[str, Any]]]:
    """The child's side: the limits, the conversations as (name, context, probe), the jobs. Raises ValueError."""
    request = json.loads(raw)
    if not isinstance(request, dict):
        raise ValueError(f"request must be a JSON object. Got {type(request).__name__}.")
    limits = request.get("limits")
    conversations = request.get("conversations")
    jobs = request.get("jobs")
    if not isinstance(limits, dict) or not isinstance(conversations, list) or not isinstance(jobs, list):
        raise ValueError("request needs 'limits' (object), 'conversations' and 'jobs' (lists).")
    convs: list[tuple[str, dict[str, object], bool]] = []
    for conv in conversations:
        if (
            not isinstance(conv, dict)
            or not isinstance(conv.get("name"), str)
            or not isinstance(conv.get("context"), dict)
        ):
            raise ValueError(f"each conversation needs a 'name' and a 'context'. Got {conv!r:.80}.")
        convs.append((conv["name"], conv["context"], conv.get("probe") is True))
    for job in jobs:
        if not isinstance(job, dict) or not isinstance(job.get("source"), str):
            raise ValueError(f"each job needs a 'source' string. Got {job!r:.80}.")
        if "static" in job and not isinstance(job["static"], dict):
            raise ValueError(f"a job's 'static' must be an object. Got {job['static']!r:.80}.")
    return limits, convs, jobs


def encode_line(message: Ready | Inspected | Answer) -> str:
    """One line of the child's stdout."""
    return json.dumps(message, ensure_ascii=True) + "\n"


def parse_line(line: bytes) -> dict[str, object]:
    """The parent's side: one line of the child's stdout (untrusted). Raises :class:`ProtocolError`."""
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"the render child wrote a line that is not JSON: {line[:120]!r}") from exc
    if not isinstance(message, dict):
        raise ProtocolError(f"the render child wrote {type(message).__name__}, not an object")
    return message
