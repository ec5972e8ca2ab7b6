"""The render child: its line protocol, its main (the child side) and the runner (the parent side).

Only :mod:`gguf_audit.templates.sandbox.runner` starts processes. The child runs
:mod:`gguf_audit.templates.sandbox.worker`, which imports nothing of gguf_audit
but :mod:`~gguf_audit.templates.environment` and the protocol.
"""
