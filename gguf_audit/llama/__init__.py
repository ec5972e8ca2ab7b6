"""The pinned llama.cpp build as data: its names and bounds (``tables``), and their generator (``generate``).

Moving to a newer llama.cpp: rebuild the oracle, run ``python -m gguf_audit.llama.generate``
over the same source, point :data:`BUILD` at the new file, read the test diff.
"""

from __future__ import annotations

from gguf_audit.llama.tables import BUILD, LlamaTables, TensorPrograms, llama_tables, tensor_programs

__all__ = ["BUILD", "LlamaTables", "TensorPrograms", "llama_tables", "tensor_programs"]
