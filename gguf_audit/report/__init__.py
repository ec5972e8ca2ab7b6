"""Renderers: a file's audit as text, a gguf-dump-like listing, JSON and SARIF; a night as HTML and a diff.

``format`` holds what every report shares (the one escape of untrusted text,
the one finding line, byte sizes); ``text``, ``dump``, ``json`` and ``sarif``
render one file's audit; ``nightly`` (the night and diff models), ``html`` and
``charts`` (inline SVG) render nights.
"""
