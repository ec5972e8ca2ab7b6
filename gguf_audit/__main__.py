"""``python -m gguf_audit``: the ``gguf-audit`` command, for environments without its script on PATH."""

from gguf_audit.cli import run

run()
