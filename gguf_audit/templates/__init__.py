"""Chat templates as untrusted code: inspect them statically, render them in a limited child process.

Layers, each importing only the ones after it:

* :mod:`~gguf_audit.templates.audit`: the audit of a file's templates, its
  findings, and :class:`~gguf_audit.templates.audit.TemplateCache`, which
  renders each template set once, also across threads in flight;
* :mod:`~gguf_audit.templates.sandbox`: the render child (its line
  protocol, its main, and the runner, the only code here that starts processes);
* :mod:`~gguf_audit.templates.inspect`: the pure static analysis;
* :mod:`~gguf_audit.templates.environment`, ``conversations``, ``limits``:
  the Jinja setup, the standard conversations and the limits both sides share.

This package imports nothing heavy on its own: the render child imports it.
"""
