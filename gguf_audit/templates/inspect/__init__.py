"""Pure static analysis of chat templates: parse, evaluate abstractly, judge every lookup name.

:func:`gguf_audit.templates.inspect.inspector.inspect_template_source` is the
entry point; its module states the rule. No processes, threads or I/O here.
"""
