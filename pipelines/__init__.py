"""dask glue for ``gguf-audit scan`` (installed as ``gguf_audit.pipelines``): discover, audit in batches, write tables.

No format logic lives here: parsing and checks are in :mod:`gguf_audit`, the
table schemas and rows in :mod:`gguf_audit.tables`. This is the only package
that imports dask, and only once a scan starts.

Modules, bottom up: ``config`` (run configs), ``discover`` (listings and
manifests), ``batches``, ``execute`` (the worker side), ``store`` (staging and
the commit), ``reuse`` (incremental runs), ``collect`` (the driver's running
state and the run's result), ``run`` (:func:`~gguf_audit.pipelines.run.run_scan`
and the cluster), ``cli`` (``gguf-audit scan``) and ``demo``; the
``gguf_audit.commands`` entry points plug ``scan`` and ``demo`` into ``gguf-audit``.
"""
