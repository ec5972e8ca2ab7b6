"""The batch jobs behind ``gguf-audit scan`` and the commands that read its nights (``gguf_audit.pipelines``).

No format logic lives here: parsing and checks are in :mod:`gguf_audit`, the
table schemas and rows in :mod:`gguf_audit.tables`. Rooms, bottom up (each
package's ``__init__`` lists its public names; ``tests/test_layers.py`` keeps
the imports pointing down):

- :mod:`~gguf_audit.pipelines.config`: a scan's settings;
- :mod:`~gguf_audit.pipelines.listing`: listing a collection and what it cost;
- :mod:`~gguf_audit.pipelines.store`: data files, Delta tables, the commit and its lease, retention, DuckDB;
- :mod:`~gguf_audit.pipelines.nights`: committed nights read back (picture, views, diff, exports);
- :mod:`~gguf_audit.pipelines.scan`: running a night (driver, worker tasks, reuse, lineage; the only importer of dask);
- :mod:`~gguf_audit.pipelines.commands`: one module per subcommand, plugged into ``gguf-audit`` by entry points.
"""
