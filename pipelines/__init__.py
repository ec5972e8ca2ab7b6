"""dask glue for ``gguf-audit scan`` (installed as ``gguf_audit.pipelines``): discover, audit in batches, write tables.

No format logic lives here: parsing and checks are in :mod:`gguf_audit`, the
table schemas and rows in :mod:`gguf_audit.tables`. This is the only package
that imports dask, and only once a scan starts.

Modules, bottom up: ``config`` (run configs), ``discover`` (listings and
manifests), ``batches``, ``parts`` (Parquet data files written under the
tables), ``tally`` (counts without rows), ``execute`` (the worker side),
``delta`` (the Delta tables through deltalake), ``output`` (the preflight, the
commit and its recovery), ``reuse`` (incremental nights), ``collect`` (the
driver's running state and the run's result), ``night`` (the driver's part of
a night), ``run`` (:func:`~gguf_audit.pipelines.run.run_scan` and the
cluster), ``picture`` (a night as of its run), ``retention`` (vacuum),
``duck`` (DuckDB with its delta extension), ``cli`` (``gguf-audit scan``),
``tables_cli`` (``snapshot`` and ``tables``) and ``demo``; the
``gguf_audit.commands`` entry points plug ``scan``, ``demo``, ``snapshot`` and
``tables`` into ``gguf-audit``.
"""
