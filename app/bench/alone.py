"""Each stage's rate alone: what the pipeline's efficiency is measured against.

The pipeline's ceiling is its slowest stage run by itself, with the whole machine and the
threads the pipeline gave it: decoding and preprocessing a clip (no model), and inference on
prepared batches (no decoding). End-to-end fps over the slower of the two is the efficiency
``vidpipe bench`` reports; postprocessing and the sinks are the pipeline's own cost, not a
stage a user can speed up separately, so they count against it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import torch

from models.runtime.onnxruntime import OnnxRuntimeBackend
from models.spec import ModelSpec
from pipelines.frame import Frame
from pipelines.preprocess.opencv import OpenCVPreprocessor

KEPT_FRAMES = 32  # prepared frames kept for the inference run (cycled)


@dataclass(frozen=True, slots=True)
class StagesAlone:
    feed_fps: float  # decode + preprocess, ``decode_threads`` FFmpeg threads
    infer_fps: float  # inference in batches of ``batch_size``, ``infer_threads`` threads
    decode_threads: int
    infer_threads: int
    batch_size: int

    @property
    def slowest_fps(self) -> float:
        return min(self.feed_fps, self.infer_fps)

    def as_dict(self) -> dict[str, float | int]:
        return {"feed_fps": self.feed_fps, "infer_fps": self.infer_fps,
                "decode_threads": self.decode_threads, "infer_threads": self.infer_threads,
                "batch_size": self.batch_size}


def measure_alone(clip: Path, model_path: Path, spec: ModelSpec, *, decode_threads: int,
                  infer_threads: int, batch_size: int,
                  frame_limit: int | None = None) -> StagesAlone:
    """Decode + preprocess ``clip`` (up to ``frame_limit`` frames), then infer as many frames
    in batches of ``batch_size`` made from the first prepared ones; each side timed alone."""
    prepare = OpenCVPreprocessor(spec.input)
    kept: list[torch.Tensor] = []
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_type = "AUTO"
        stream.codec_context.thread_count = decode_threads
        frames, start = 0, time.perf_counter()
        for picture in container.decode(stream):
            image = torch.from_numpy(picture.to_ndarray(format="rgb24"))
            batch = prepare.prepare(Frame("alone", frames, None, 0.0, image))
            if len(kept) < KEPT_FRAMES:
                kept.append(batch.tensor)
            frames += 1
            if frame_limit is not None and frames >= frame_limit:
                break
        feed_s = time.perf_counter() - start
    if frames == 0:
        raise ValueError(f"{clip}: no frame decoded")
    inputs = [np.concatenate([t.numpy() for t in group]) for group in
              _groups(kept, batch_size)]
    with OnnxRuntimeBackend(model_path, threads=infer_threads) as backend:
        name = backend.inputs[0].name
        backend.infer({name: inputs[0]})  # first call: allocation and kernel selection
        done, start = 0, time.perf_counter()
        for tensor in itertools.cycle(inputs):
            backend.infer({name: tensor})
            done += len(tensor)
            if done >= frames:
                break
        infer_s = time.perf_counter() - start
    return StagesAlone(frames / feed_s, done / infer_s, decode_threads, infer_threads,
                       batch_size)


def _groups(items: list[torch.Tensor], size: int) -> list[list[torch.Tensor]]:
    """Full groups of ``size`` (cycling the items when there are fewer)."""
    cycled = list(itertools.islice(itertools.cycle(items), max(size, len(items) // size * size)))
    return [cycled[i:i + size] for i in range(0, len(cycled), size)]
