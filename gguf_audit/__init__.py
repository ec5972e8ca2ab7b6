"""gguf-audit: audit GGUF model files where they are stored, reading only their headers and a few blocks."""

__version__ = "0.1.0"

VERDICTS_VERSION = 2
"""Raised by a release whose checks judge the same bytes otherwise (a new check, a changed severity,
other samples for the same settings). An incremental scan reuses rows only from a run of the same
verdicts version and check settings; a release that changes only what is written keeps it.
2: three llama.cpp verdicts (loads, refuses, aborts) for build b11312, and the ``llama_cpp`` column
of ``files``, ``models`` and ``problems`` that rows read by earlier releases lack."""
