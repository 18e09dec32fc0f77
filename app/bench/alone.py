"""Each stage's rate alone: what the pipeline's efficiency is measured against.

The pipeline's ceiling is its slowest stage run by itself, with the whole machine and the
threads the pipeline gave it: decoding and preprocessing a clip (no model), and inference on
batches (no decoding). These are the thread plan's own probes (``pipelines.threads``), run
longer and with the plan's thread counts. End-to-end fps over the slower of the two is the
efficiency ``vidpipe bench`` reports; postprocessing and the sinks are the pipeline's own
cost, not a stage a user can speed up separately, so they count against it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from models.spec import ModelSpec
from pipelines.threads import time_infer, time_prepare

INFER_CALLS = 30  # inference calls timed (median)


@dataclass(frozen=True, slots=True)
class StagesAlone:
    prepare_fps: float  # decode + preprocess, ``decode_threads`` FFmpeg threads
    infer_fps: float  # inference in batches of ``batch_size``, ``infer_threads`` threads
    decode_threads: int
    infer_threads: int  # per call
    batch_size: int
    prepare_cpu_ms: float = 0.0  # CPU time per frame (all threads) while preparing alone
    infer_cpu_ms: float = 0.0  # CPU time per frame while inferring alone
    infer_workers: int = 1  # inference calls at once

    @property
    def slowest_fps(self) -> float:
        return min(self.prepare_fps, self.infer_fps)

    def cpu_ceiling_fps(self, cores: int) -> float:
        """The most frames a second ``cores`` could do if both sides cost what they cost
        alone and no core ever idled: the ceiling when the stages share the cores."""
        cpu_ms = self.prepare_cpu_ms + self.infer_cpu_ms
        return cores * 1e3 / cpu_ms if cpu_ms > 0 else float("inf")

    @classmethod
    def median(cls, runs: Sequence[StagesAlone]) -> StagesAlone:
        """Each figure's median over repeated measurements of the same threads and batch."""
        def mid(name: str) -> float:
            return float(statistics.median(getattr(r, name) for r in runs))

        return replace(runs[0], prepare_fps=mid("prepare_fps"), infer_fps=mid("infer_fps"),
                       prepare_cpu_ms=mid("prepare_cpu_ms"), infer_cpu_ms=mid("infer_cpu_ms"))

    def as_dict(self) -> dict[str, float | int]:
        return {"prepare_fps": self.prepare_fps, "infer_fps": self.infer_fps,
                "decode_threads": self.decode_threads, "infer_threads": self.infer_threads,
                "batch_size": self.batch_size, "prepare_cpu_ms": self.prepare_cpu_ms,
                "infer_cpu_ms": self.infer_cpu_ms, "infer_workers": self.infer_workers}


def measure_alone(clip: Path, model_path: Path, spec: ModelSpec, *, decode_threads: int,
                  infer_threads: int, batch_size: int, frame_limit: int | None = None,
                  infer_workers: int = 1) -> StagesAlone:
    """Decode + preprocess ``clip`` (up to ``frame_limit`` frames); then time inference in
    batches of ``batch_size``, ``infer_workers`` calls at once; each side alone."""
    prepared = time_prepare(clip, spec.input, frame_limit, threads=decode_threads)
    if prepared is None:
        raise ValueError(f"{clip}: fewer than two frames decoded")
    infer = time_infer(model_path, spec.input.image_shape, spec.input.dtype, INFER_CALLS,
                       threads=infer_threads, batch=batch_size, workers=infer_workers)
    return StagesAlone(1e3 / prepared.wall_ms, 1e3 / infer.wall_ms, decode_threads,
                       infer_threads, batch_size, prepared.cpu_ms, infer.cpu_ms, infer_workers)
