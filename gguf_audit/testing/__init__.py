"""Test support shipped with gguf-audit: a GGUF byte builder, loopback servers, hypothesis strategies.

``builder`` (with ``encoding``) writes GGUF files field by field, valid or
broken on purpose; ``http`` and ``s3`` are real loopback servers with request
accounting (``loopback`` is what they share); ``strategies`` draws whole GGUF
files with their expected parse (it needs hypothesis, a test dependency).
"""

from __future__ import annotations
