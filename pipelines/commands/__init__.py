"""One module per ``gguf-audit`` subcommand (argparse and the command's own output); nothing imports them.

The ``gguf_audit.commands`` entry points in ``pyproject.toml`` are the inventory:
``gguf_audit.cli`` imports a command's module only when it is the command given.
"""
