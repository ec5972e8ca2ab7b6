"""``python -m gguf_audit``: the ``gguf-audit`` command, for environments without its script on PATH."""

import sys

from gguf_audit.cli import main

sys.exit(main())
