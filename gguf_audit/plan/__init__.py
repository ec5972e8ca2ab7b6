"""Which tensor blocks to read, and the byte ranges that fetch them.

Pure: a parsed :class:`~gguf_audit.format.model.Header` in, a
:class:`SamplePlan` out. No I/O.

- :mod:`~gguf_audit.plan.model`: the values (ranges, blocks, the plan, the
  config), how a tensor divides into sampling blocks, the file identity and
  the strata of the data section;
- :mod:`~gguf_audit.plan.windows`: :func:`plan_samples`, an audit's plan, a few
  windows placed for coverage within a request and a byte budget;
- :mod:`~gguf_audit.plan.explicit`: plans without a budget, blocks chosen by
  index (:func:`plan_blocks`) or spread through every tensor (:func:`plan_spread`);
- :mod:`~gguf_audit.plan.ranges`: :func:`merge_ranges` and :func:`plan_fetch`.
"""

from gguf_audit.plan.explicit import plan_blocks, plan_spread, spread_indices
from gguf_audit.plan.model import (
    DEFAULT_SAMPLE_CONFIG,
    RUN_ELEMS,
    STRATA,
    BlockGeometry,
    ByteRange,
    PlannedBlock,
    SampleConfig,
    SamplePlan,
    SelectionError,
    block_at,
    data_section,
    file_identity,
    strata_mask,
    stratum_bounds,
    tensor_geometry,
)
from gguf_audit.plan.ranges import merge_ranges, plan_fetch
from gguf_audit.plan.windows import plan_samples

__all__ = [
    "DEFAULT_SAMPLE_CONFIG",
    "RUN_ELEMS",
    "STRATA",
    "BlockGeometry",
    "ByteRange",
    "PlannedBlock",
    "SampleConfig",
    "SamplePlan",
    "SelectionError",
    "block_at",
    "data_section",
    "file_identity",
    "merge_ranges",
    "plan_blocks",
    "plan_fetch",
    "plan_samples",
    "plan_spread",
    "spread_indices",
    "strata_mask",
    "stratum_bounds",
    "tensor_geometry",
]
