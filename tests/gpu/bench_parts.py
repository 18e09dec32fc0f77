"""What bench_gpu.py is built from: the plan of a run (full or smoke), the one table it
prints within a time budget, and NVML's view of the GPU while a part runs."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from pipelines.cuda import library_available

Row = tuple[str, str, str]  # what, figure, how it was measured


@dataclass(frozen=True, slots=True)
class Plan:
    """Sizes of the runs; ``smoke()`` shrinks them to check the script on a CPU."""

    device: str = "cuda:0"
    agree_clip: tuple[int, int] = (1280, 720)
    agree_frames: int = 90
    clip: tuple[int, int] = (1920, 1080)
    clip_frames: int = 240
    runs: tuple[tuple[int, int], ...] = ((1, 240), (8, 120), (32, 60))  # streams, frames each

    @classmethod
    def smoke(cls) -> Plan:
        return cls("cpu", (640, 360), 10, (320, 180), 8, ((1, 8), (2, 4)))


class Table:
    def __init__(self, budget_s: float) -> None:
        self.rows: list[Row] = []
        self.deadline = time.monotonic() + budget_s

    def add(self, what: str, figure: str, note: str = "") -> None:
        self.rows.append((what, figure, note))
        print(f"  {what}: {figure} {note}", file=sys.stderr, flush=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def attempt(self, what: str, share_s: float, part: Callable[[], None]) -> None:
        """Run one part if at least ``share_s`` seconds are left; record its failure as a row."""
        if self.left() < share_s:
            self.add(what, "skipped", f"(time budget: {self.left():.0f} s left)")
            return
        try:
            part()
        except Exception as e:  # a broken part must not hide the others' figures
            self.add(what, "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:90]}")

    def render(self) -> str:
        widths = [max(len(r[i]) for r in [("measure", "value", "how"), *self.rows])
                  for i in range(3)]
        line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
        out = [line, "| " + " | ".join(h.ljust(w) for h, w in
                                         zip(("measure", "value", "how"), widths, strict=True))
               + " |", line]
        out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
                for r in self.rows]
        return "\n".join([*out, line])


class NvmlWatch:
    """Samples NVML every 0.2 s on a thread of the benchmark while a run goes on."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry

        from pipelines.gpu_metrics import GpuSampler

        self.sampler: Any = None
        if library_available("pynvml"):
            try:
                self.sampler = GpuSampler(CollectorRegistry(), torch.cuda.current_device())
            except Exception:
                self.sampler = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NvmlWatch:
        if self.sampler is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.sampler.sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def describe(self) -> str:
        if self.sampler is None:
            return "NVML n/a"
        s = self.sampler.summary()
        if not s:
            return "no NVML sample"
        return (f"GPU {s['gpu_utilization_mean']:.0%} avg / {s['gpu_utilization_max']:.0%} max, "
                f"NVDEC {s['decoder_utilization_mean']:.0%} avg / "
                f"{s['decoder_utilization_max']:.0%} max, "
                f"mem {s['memory_used_bytes_max'] / 2**30:.1f} GiB")
