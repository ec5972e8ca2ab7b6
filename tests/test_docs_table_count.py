"""The README, the docs and the store's docstrings say as many tables as the schema holds (``SCHEMAS``)."""

from __future__ import annotations

import re

from corpus import REPO

from gguf_audit.tables.schema import SCHEMAS

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
COUNTED = re.compile(rf"\b({'|'.join(WORDS)}|\d+) (?:Delta |audit |Parquet )?tables\b", re.I)


def test_every_count_of_the_tables_is_the_schemas() -> None:
    places = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    places += [REPO / "pipelines" / "store" / "output.py", REPO / "pipelines" / "store" / "delta.py"]
    places += [REPO / "gguf_audit" / "tables" / "schema.py"]
    said = {
        (path.name, match.group(0))
        for path in places
        for match in COUNTED.finditer(path.read_text(encoding="utf-8"))
        if not match.group(1).isdigit()
    }
    assert said, "no count of the tables found"
    wrong = {(name, words) for name, words in said if words.split()[0].lower() != WORDS[len(SCHEMAS)]}
    assert not wrong, f"{len(SCHEMAS)} tables in SCHEMAS; these say otherwise: {sorted(wrong)}"
