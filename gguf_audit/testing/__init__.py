"""Test support shipped with gguf-audit: a GGUF byte builder, loopback servers, the llama.cpp oracle, fuzzing.

``builder`` (with ``encoding``) writes GGUF files field by field, valid or
broken on purpose, ``layouts`` and ``vocab`` big-model shapes made on demand;
``http``, ``s3``, ``hub`` (with ``hub_store``, ``hub_gguf`` and ``cdn``) are real
loopback servers with request accounting (``loopback`` is what they share);
``oracle`` runs the pinned llama.cpp on files, ``mutate``, ``retype`` and
``conformance`` make and judge mutants against it; ``strategies`` draws whole
GGUF files with their expected parse (it needs hypothesis, a test dependency).
"""

from __future__ import annotations
