"""bench_header.py's figures as text: megabytes, milliseconds, aligned tables and Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["markdown_table", "mb", "mb_or_dash", "ms", "print_table", "ratio"]


def mb(n: float) -> str:
    return f"{n / 1e6:.2f}"


def ms(s: float) -> str:
    return f"{s * 1000:.1f}"


def print_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def mb_or_dash(n: int | None, unit: str = "") -> str:
    return "-" if n is None else mb(n) + unit


def ratio(a: float | None, b: float | None, digits: int = 3) -> str:
    return "-" if a is None or not b else f"{a / b:.{digits}f}"
