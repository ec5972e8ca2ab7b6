"""The driver's memory: what a night keeps on its own disk rather than in its heap, and its phase boundaries.

- mapped Arrow tables and NumPy arrays in unlinked temporary files (the listing, the groups' columns);
- the SQLite ledger of the listed URLs and the spilled Arrow tables (:class:`UrlLedger`, :class:`TableSpill`);
- :func:`driver_phase` and :func:`released_after_each`: where freed memory goes back to the system.

Nothing here goes to a worker, and nothing here knows what a night is.
"""

from __future__ import annotations

from gguf_audit.pipelines.spill._ledger import TableSpill, UrlLedger
from gguf_audit.pipelines.spill._mapped import (
    MappedWriter,
    array_on_disk,
    is_mapped,
    map_column,
    map_table,
    temp_dir_in_memory,
)
from gguf_audit.pipelines.spill._phases import PhaseEnd, driver_phase, released_after_each, watch_phases

__all__ = [
    "MappedWriter",
    "PhaseEnd",
    "TableSpill",
    "UrlLedger",
    "array_on_disk",
    "driver_phase",
    "is_mapped",
    "map_column",
    "map_table",
    "released_after_each",
    "temp_dir_in_memory",
    "watch_phases",
]
