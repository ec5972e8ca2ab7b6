"""Test support shipped with gguf-audit: loopback servers and a GGUF byte builder."""
