"""The GGUF format: pure bytes-to-values parsing, no I/O."""

from __future__ import annotations

from gguf_audit.format.model import KV, Header, NeedMore, StringArray, TensorInfo, ValueType
from gguf_audit.format.parser import parse_header
from gguf_audit.format.wire import Limits

__all__ = ["KV", "Header", "Limits", "NeedMore", "StringArray", "TensorInfo", "ValueType", "parse_header"]
