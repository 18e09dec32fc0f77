"""What the machine is, and how fast its cores run when all of them are busy at once.

Stage rates measured alone overstate what a pipeline can reach when its stages share the
cores: on a virtual machine (and on one with shared caches or turbo clocks) a core runs slower
while the others are busy too. ``core_speed_all_busy`` measures that with a fixed loop in one
process alone, then in one process per core at once, so the bench can say how much of a
shortfall the machine itself explains.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# Counts turns of a plain Python loop for a fixed wall time: it measures the core, not a
# library, and needs nothing but the interpreter.
_SPIN = """
import time
end = time.perf_counter() + {seconds}
turns = 0
while time.perf_counter() < end:
    for _ in range(1000):
        pass
    turns += 1
print(turns)
"""


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def _spin(processes: int, seconds: float) -> list[int]:
    code = _SPIN.format(seconds=seconds)
    running = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    return [int(p.communicate()[0]) for p in running]


def core_speed_all_busy(seconds: float = 1.0, cores: int | None = None) -> dict[str, Any]:
    """Loop turns per core with every core busy, over turns with one busy: 1.0 means the cores
    do not slow each other down. Alone, together, alone again (drift shows as a gap)."""
    cores = cores or os.cpu_count() or 1
    first = _spin(1, seconds)
    together = _spin(cores, seconds)
    alone = first + _spin(1, seconds)
    ratio = (sum(together) / len(together)) / (sum(alone) / len(alone))
    return {"cores": cores, "seconds": seconds, "turns_alone": alone,
            "turns_together": together, "ratio": ratio}
