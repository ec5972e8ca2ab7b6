"""gguf-audit: audit GGUF model files where they are stored, reading only their headers and a few blocks."""

__version__ = "0.1.0"
