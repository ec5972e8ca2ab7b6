"""A process that only starts commands, for benchmarks that measure their children's peak memory.

Started first thing, while the benchmark is still small: Linux keeps the larger
``ru_maxrss`` across ``exec``, so children started by the benchmark itself would
inherit its peak; started by this launcher they inherit the launcher's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["Launcher"]

# A process that only runs commands: started first thing, while the benchmark
# is still small, so the children it starts inherit its small ru_maxrss
# instead of the benchmark's peak (Linux keeps the larger across exec).
_LAUNCHER = """
import json, subprocess, sys
for line in sys.stdin:
    done = subprocess.run(json.loads(line), capture_output=True, text=True, timeout=600)
    sys.stdout.write(json.dumps([done.returncode, done.stdout, done.stderr]) + "\\n")
    sys.stdout.flush()
"""


class Launcher:
    """Runs commands in children of a process started before the benchmark grew."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, cmd: Sequence[str]) -> tuple[int, str, str]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the launcher has no pipes")
        stdin.write(json.dumps(list(cmd)) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the launcher exited with {self._proc.wait()}")
        code, out, err = json.loads(line)
        return int(code), str(out), str(err)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
