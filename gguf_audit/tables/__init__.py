"""The audit tables: their Arrow schemas and the rows built from file audits.

Modules, bottom up: :mod:`~gguf_audit.tables.schema` (every table's schema and
the schema version), :mod:`~gguf_audit.tables.cells` (untrusted values as
cells), :mod:`~gguf_audit.tables.listed` (what a listing says of a file),
:mod:`~gguf_audit.tables.per_file` (``files``, ``problems``, ``tensors``,
``metadata``, ``samples``), :mod:`~gguf_audit.tables.models` (``models``),
:mod:`~gguf_audit.tables.shard_facts` (shard facts read back from stored rows) and
:mod:`~gguf_audit.tables.stored_header` (a file's tensor table read back from stored rows).

Pure: values in, Arrow tables out. No I/O and no dask; this package never
imports :mod:`gguf_audit.pipelines`.
"""
