"""dask glue for ``gguf-audit scan``: discover files, audit them in batches, write the audit tables.

No format logic lives here: parsing and checks are in :mod:`gguf_audit`, the
table schemas in :mod:`gguf_audit.schema`. This is the only package that imports dask.
"""
