"""The template cache: each template set rendered once, also across threads in flight, and never wedged."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gguf_audit.audit import AuditConfig, AuditResources, audit_file
from gguf_audit.codes import Code
from gguf_audit.format import Header, ValueType, parse_header
from gguf_audit.templates.audit import FileTemplates, TemplateCache, audit_header_templates
from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.templates.sandbox import runner
from gguf_audit.testing.builder import build_gguf, kv_array, kv_str, kv_u32

FIXTURES = Path(__file__).parent / "fixtures"
FAST = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0)
KEY = "tokenizer.chat_template"
THREADS = 8
#: Long enough for any thread to get going on a loaded host; a hang fails within it.
JOIN_SECONDS = 120.0


def _chatml() -> dict[str, str]:
    return {KEY: (FIXTURES / "chatml.jinja").read_text(encoding="utf-8")}


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + JOIN_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Spawns:
    """Counts render-child starts; ``before(n)`` runs before the n-th start (and may raise instead)."""

    def __init__(self, before: Callable[[int], None] | None = None) -> None:
        self.calls = 0
        self.before = before
        self._lock = threading.Lock()
        self._spawn = runner._spawn

    def __call__(self) -> subprocess.Popen[bytes]:
        with self._lock:
            self.calls += 1
            n = self.calls
        if self.before is not None:
            self.before(n)
        return self._spawn()


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Spawns]:
    counter = _Spawns()
    monkeypatch.setattr(runner, "_spawn", counter)
    yield counter


def _hold_first_until_all_wait(cache: TemplateCache, spawns: _Spawns, then: Callable[[], None] | None = None) -> None:
    """Make the first child start wait until every other thread waits on its audit, then run ``then``."""

    def before(n: int) -> None:
        if n == 1:
            _wait_for(lambda: cache.stats().waits >= THREADS - 1, f"{THREADS - 1} waiting threads")
            if then is not None:
                then()

    spawns.before = before


def _in_threads(call: Callable[[], FileTemplates]) -> list[FileTemplates | BaseException]:
    """Run ``call`` in THREADS threads at once; each one's result or exception, in thread order."""
    outcomes: list[FileTemplates | BaseException | None] = [None] * THREADS
    start = threading.Barrier(THREADS)

    def work(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects what each thread got
            outcomes[i] = exc

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a thread is wedged"
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


# --- one render per set, also in flight ----------------------------------------


def test_threads_in_flight_start_the_child_once(spawns: _Spawns) -> None:
    cache = TemplateCache(limits=FAST)
    _hold_first_until_all_wait(cache, spawns)
    outcomes = _in_threads(lambda: cache.audit(_chatml(), bos_token="<s>", eos_token="</s>"))
    assert spawns.calls == 1
    first = outcomes[0]
    assert not isinstance(first, BaseException)
    assert all(o is first for o in outcomes)
    (audit,), file_findings = first
    assert audit.rendered is not None and audit.findings == () and file_findings == ()
    stats = cache.stats()
    assert (stats.misses, stats.waits, stats.hits, stats.entries) == (1, THREADS - 1, 0, 1)
    # Later callers are answered from the cache.
    assert cache.audit(_chatml(), bos_token="<s>", eos_token="</s>") is first
    assert spawns.calls == 1 and cache.stats().hits == 1


def test_a_failing_render_gives_the_waiters_its_error_and_is_not_cached(spawns: _Spawns) -> None:
    cache = TemplateCache(limits=FAST)

    def fail() -> None:
        raise OSError(11, "Resource temporarily unavailable")

    _hold_first_until_all_wait(cache, spawns, then=fail)
    outcomes = _in_threads(lambda: cache.audit(_chatml()))
    assert spawns.calls == 1
    assert all(isinstance(o, OSError) and "Resource temporarily unavailable" in str(o) for o in outcomes)
    assert cache.stats().entries == 0
    # The next caller renders again, and that result is kept.
    (audit,), _ = cache.audit(_chatml())
    assert audit.rendered is not None
    assert spawns.calls == 2 and cache.stats().entries == 1


class _Interrupted(BaseException):
    """Stands for KeyboardInterrupt or a cancellation in the auditing thread."""


def test_an_interrupted_render_hands_over_to_a_waiter(spawns: _Spawns) -> None:
    cache = TemplateCache(limits=FAST)

    def interrupt() -> None:
        raise _Interrupted

    _hold_first_until_all_wait(cache, spawns, then=interrupt)
    outcomes = _in_threads(lambda: cache.audit(_chatml()))
    interrupted = [o for o in outcomes if isinstance(o, _Interrupted)]
    results = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(interrupted) == 1 and len(results) == THREADS - 1
    # One waiter took over and rendered; the others shared its result.
    assert spawns.calls == 2
    assert all(r is results[0] for r in results)
    assert results[0][0][0].rendered is not None


# --- the LRU and its key ----------------------------------------------------------


def _broken(name: str) -> dict[str, str]:
    """A template set that does not parse (the child parses it, and renders nothing)."""
    return {KEY: "{{ " + name}


def test_least_recently_used_set_is_evicted(spawns: _Spawns) -> None:
    cache = TemplateCache(max_entries=2, limits=FAST)
    a = cache.audit(_broken("a"))
    assert [f.code for f in a[0][0].findings] == [Code.TEMPLATE_SYNTAX_ERROR]
    cache.audit(_broken("b"))
    assert cache.audit(_broken("a")) is a  # a is now the most recent
    cache.audit(_broken("c"))  # evicts b
    assert cache.audit(_broken("a")) is a
    cache.audit(_broken("b"))
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (2, 4, 2)
    assert spawns.calls == stats.misses  # a child per audit run, none per answer from the cache


def test_the_key_holds_the_templates_by_key_and_both_token_texts() -> None:
    cache = TemplateCache(limits=FAST)
    cache.audit(_broken("a"), bos_token="<s>", eos_token="</s>")
    cache.audit(_broken("a"), bos_token="<s>", eos_token="<|im_end|>")
    cache.audit(_broken("a"), bos_token="", eos_token="</s>")
    cache.audit({f"{KEY}.other": "{{ a"}, bos_token="<s>", eos_token="</s>")
    cache.audit(_broken("a"), bos_token="<s>", eos_token="</s>")
    stats = cache.stats()
    assert (stats.misses, stats.hits) == (4, 1)


@pytest.mark.parametrize("max_entries", [0, -1, True, 2.5])
def test_cache_size_is_validated(max_entries: object) -> None:
    with pytest.raises(ValueError, match="Got"):
        TemplateCache(max_entries=max_entries)  # type: ignore[arg-type]


# --- from a header and through audit_file -------------------------------------------

ECHO = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"


def _header_bytes() -> bytes:
    tokens = ["<unk>", "<s>", "</s>", "hello"]
    return build_gguf(
        [
            kv_str("general.architecture", "llama"),
            kv_str(KEY, ECHO),
            kv_str(f"{KEY}.tool_use", ECHO + "!"),
            kv_u32(f"{KEY}.not_a_string", 7),
            kv_str("tokenizer.chat_templates", "{{ not a template key"),
            kv_array("tokenizer.ggml.tokens", ValueType.STRING, tokens),
            kv_u32("tokenizer.ggml.bos_token_id", 1),
            kv_u32("tokenizer.ggml.eos_token_id", 2),
        ]
    )


def _header(data: bytes) -> Header:
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def test_header_templates_render_with_the_files_token_texts(spawns: _Spawns) -> None:
    cache = TemplateCache(limits=FAST)
    audits, file_findings = audit_header_templates(_header(_header_bytes()), cache=cache)
    assert file_findings == ()
    assert [a.key for a in audits] == [KEY, f"{KEY}.tool_use"]
    for audit in audits:
        assert audit.rendered is not None
        assert audit.rendered.startswith("<s>You are a helpful assistant.")
    assert audits[0].rendered is not None and audits[0].rendered.endswith("</s>")
    assert spawns.calls == 1


def test_header_without_tokens_renders_with_empty_token_texts() -> None:
    data = build_gguf([kv_str("general.architecture", "llama"), kv_str(KEY, ECHO)])
    (audit,), _ = audit_header_templates(_header(data), cache=TemplateCache(limits=FAST))
    assert audit.rendered is not None
    assert audit.rendered.startswith("You are a helpful assistant.Hello! Who are you?")
    assert audit.rendered.endswith("It is 18 degrees Celsius in Paris.")


def test_audit_file_renders_through_the_cache_it_is_given(tmp_path: Path, spawns: _Spawns) -> None:
    paths = [tmp_path / "a.gguf", tmp_path / "b.gguf"]
    for path in paths:
        path.write_bytes(_header_bytes())
    cache = TemplateCache(limits=FAST)
    config = AuditConfig(semantics=False)
    first, second = (audit_file(str(p), config=config, resources=AuditResources(template_cache=cache)) for p in paths)
    assert [a.key for a in first.templates] == [KEY, f"{KEY}.tool_use"]
    assert first.templates == second.templates
    assert spawns.calls == 1
    stats = cache.stats()
    assert (stats.misses, stats.hits) == (1, 1)
