"""The GGUF format: pure bytes-to-values parsing, no I/O."""

from gguf_audit.format.model import KV, Header, NeedMore, StringArray, TensorInfo, ValueType
from gguf_audit.format.parser import Limits, parse_header

__all__ = ["KV", "Header", "Limits", "NeedMore", "StringArray", "TensorInfo", "ValueType", "parse_header"]
