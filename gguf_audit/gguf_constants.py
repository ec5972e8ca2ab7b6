"""gguf-py's tables (``gguf.constants``: type sizes, key and tensor names) without the rest of gguf-py.

``import gguf`` runs its package ``__init__``, which imports every gguf-py
module: the reader and writer, numpy, the quantizers, ``gguf.metadata`` and
PyYAML, about 40 ms more than numpy alone, where a header's checks need only
the constants. ``gguf/constants.py`` imports nothing but the standard library, so
it is executed here on its own and registered as ``gguf.constants``: every
``from gguf.constants import ...`` after it (ours, or gguf-py's own
``from .constants import *`` when something later imports the whole package)
finds that one module, so its enums are the same objects everywhere. When
gguf-py is already imported, nothing is done. Call sites import the names from
here, never from ``gguf.constants``, so the order of imports cannot matter.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _load_constants_alone() -> None:
    if "gguf" in sys.modules or "gguf.constants" in sys.modules:
        return
    package = importlib.util.find_spec("gguf")  # finds the package without running its __init__
    locations = package.submodule_search_locations if package is not None else None
    if not locations:
        return  # not a package: let the plain import below say what is wrong
    spec = importlib.util.spec_from_file_location("gguf.constants", Path(locations[0]) / "constants.py")
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["gguf.constants"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["gguf.constants"]
        raise


_load_constants_alone()

from gguf.constants import (  # noqa: E402 - after the module is registered on its own
    GGML_QUANT_SIZES,
    MODEL_ARCH_NAMES,
    MODEL_TENSORS,
    TENSOR_NAMES,
    GGMLQuantizationType,
    Keys,
    LlamaFileType,
    TokenType,
)

__all__ = [
    "GGML_QUANT_SIZES",
    "MODEL_ARCH_NAMES",
    "MODEL_TENSORS",
    "TENSOR_NAMES",
    "GGMLQuantizationType",
    "Keys",
    "LlamaFileType",
    "TokenType",
]
