"""The run configs, shipped as ``gguf_audit.configs`` so ``--config NAME`` works outside a checkout.

Only TOML here (package data); ``gguf_audit.pipelines.config`` finds them by name.
"""
