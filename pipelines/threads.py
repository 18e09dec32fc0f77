"""How many threads ONNX Runtime gets, decided from measured costs, not assumed.

Decoding, preprocessing and inference share the same cores. ONNX Runtime's intra-op threads
meet at a barrier after every operator: when a decoder thread takes one of "its" cores, the
whole operator waits for the preempted thread. So giving ONNX Runtime every core pays only when
inference so dominates the work that the decoders rarely run; when their costs are comparable,
a core kept for decoding and preprocessing lets the two overlap, which is the point of a
pipeline. Measured on the 2-core machine (`vidpipe run build/demo/clip.mp4 --model
models/zoo/shapes-yolo/<file> --infer-threads N`, 720p, two runs each, fps):

| model | decode+prep / inference per frame | 1 thread | 2 threads |
|---|---|---|---|
| shapes-yolo FP32 | 9.3 / 16.1 ms (0.58) | 52.3, 49.2 | 56.4, 58.8 |
| shapes-yolo INT8 | 9.7 / 13.3 ms (0.73) | 72.1, 72.3 | 78.6, 71.9 |
| shapes-yolo pruned 50% | 6.4 / 3.7 ms (1.73) | 82.4, 85.5 | 80.3, 79.9 |

and the SSD person model (about 0.4) ran 30.4 fps on 1 thread, 35.6 on 2. So a core is kept
for feeding only when feeding costs at least as much as inference (``COMPARABLE``).

``measure_costs`` times, before the pipeline starts: inference per frame on one thread (a
blank image, median of a few calls) and decoding plus preprocessing
per frame of each file source (its first frames, in a separate reader, decoded the way the
pipeline will: straight to the model's size unless a sink needs full pictures). ``plan_threads``
then keeps ``cores - 1`` inference threads (at least one) whenever decoding and
preprocessing cost at least ``COMPARABLE`` times inference per frame, all cores otherwise.
Live sources cannot be read ahead; without their decode cost the plan keeps a core for them.

Decoder threads: one per file, unless decoding a file on one thread would take more than
``FRAME_THREADS_FROM`` times the time inference has for each of that file's frames
(``streams x inference ms / (cores - 1)``); then each file's FFmpeg decoder gets
``cores // files`` threads (frame threading). Frame threading costs CPU of its own (on the
demo clip 3.8 ms per frame over two threads against 3.4 on one), and on shared cores that CPU
is taken from inference. Measured after the decoder kept its converter (stop 12; interleaved,
600 frames, fps medians; ``--decode-threads 1`` vs ``2``, inference 1 thread): pruned 50 %
INT8 166.5 vs 156.4 (5 runs; feeding 5-7 ms against inference 4.1), pruned 50 % 140.7 vs
125.4 (4 runs). Before, when converting each picture cost 2 ms more, two threads had won
(112-125 vs 98-103 fps): a decoder much slower than inference still needs them. The
inference-bound FP32 and INT8 models keep every core for inference and decode on one thread.
Live sources always decode on one thread: FFmpeg's frame threading holds one frame per extra
thread before the first comes out, a frame interval of latency each.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import torch

from models.runtime.onnxruntime import OnnxRuntimeBackend
from models.spec import InputSpec
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.errors import DecodeError
from pipelines.frame import Frame
from pipelines.preprocess.opencv import OpenCVPreprocessor

log = logging.getLogger(__name__)

COMPARABLE = 1.0  # decode + preprocess / inference per frame from which a core is kept
FRAME_THREADS_FROM = 2.0  # a file's decoding / inference's time for its frames: more threads
PROBE_FRAMES = 8


@dataclass(frozen=True, slots=True)
class StageCosts:
    infer_ms: float  # per frame, one inference thread, batch 1
    feed_ms: float | None  # decode + preprocess per frame, summed over the streams (None: live)
    streams: int = 1  # file streams fed (decoder threads are shared out between them)


@dataclass(frozen=True, slots=True)
class ThreadPlan:
    infer: int
    decode: int
    reason: str


@dataclass(frozen=True, slots=True)
class ProbeTime:
    """What a probe measured per frame: wall time, and the process's CPU time over the same
    calls (all its threads: more than the wall time when several threads worked)."""

    wall_ms: float
    cpu_ms: float


def time_infer(model: Path, shape: Sequence[int], dtype: str = "float32", calls: int = 3, *,
               threads: int = 1, batch: int = 1) -> ProbeTime:
    """Per frame, over ``calls`` ONNX Runtime calls (``threads`` intra-op threads) on a blank
    batch of ``batch`` images of ``shape``: the median call's wall time, the mean CPU time."""
    with OnnxRuntimeBackend(model, threads=threads) as backend:
        feeds = {backend.inputs[0].name: np.zeros((batch, *shape), dtype=dtype)}
        backend.infer(feeds)  # first call: allocation and kernel selection
        times = []
        cpu_start = time.process_time()
        for _ in range(calls):
            start = time.perf_counter()
            backend.infer(feeds)
            times.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu_start
    return ProbeTime(statistics.median(times) * 1e3 / batch, cpu * 1e3 / (calls * batch))


def measure_infer_ms(model: Path, shape: Sequence[int], dtype: str = "float32",
                     calls: int = 3, *, threads: int = 1, batch: int = 1) -> float:
    """Median ms per frame of ``calls`` ONNX Runtime calls (see ``time_infer``)."""
    return time_infer(model, shape, dtype, calls, threads=threads, batch=batch).wall_ms


def time_feed(path: Path, spec: InputSpec, frames: int | None = PROBE_FRAMES, *,
              threads: int = 1, scaled: bool = True) -> ProbeTime | None:
    """Per frame, to decode (``threads`` FFmpeg threads; ``scaled``: straight to the model's
    letterbox size, as a pipeline without image sinks does) and preprocess the first
    ``frames`` of a file (None: all of it); None when the file gives fewer than two frames
    (the pipeline will say why)."""
    prepare = OpenCVPreprocessor(spec)
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            decoder = PyAVDecoder(stream, threads=threads,
                                  scale=ScaleTo.for_input(spec) if scaled else None)
            done, start, cpu_start = 0, time.perf_counter(), time.process_time()
            for packet in container.demux(stream):
                for picture in decoder.decode(packet):
                    prepare.prepare(Frame("probe", done, None, 0.0,
                                          torch.from_numpy(picture.image),
                                          source_size=picture.source_size))
                    done += 1
                if frames is not None and done >= frames:
                    break
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    except (av.FFmpegError, DecodeError, OSError, IndexError):
        return None
    return ProbeTime(elapsed * 1e3 / done, cpu * 1e3 / done) if done >= 2 else None


def measure_feed_ms(path: Path, spec: InputSpec, frames: int | None = PROBE_FRAMES, *,
                    threads: int = 1, scaled: bool = True) -> float | None:
    """ms per frame to decode and preprocess a file's first frames (see ``time_feed``)."""
    probe = time_feed(path, spec, frames, threads=threads, scaled=scaled)
    return None if probe is None else probe.wall_ms


def plan_threads(costs: StageCosts | None, cores: int, *, infer_threads: int | None = None,
                 decode_threads: int | None = None) -> ThreadPlan:
    """The thread plan for ``cores`` given the measured ``costs`` (see the module doc)."""
    decode = decode_threads if decode_threads is not None else 1  # 0: FFmpeg's own choice
    if infer_threads is not None:
        return ThreadPlan(infer_threads, decode, "given")
    if cores <= 1:
        return ThreadPlan(1, decode, "1 core")
    if costs is None:
        return ThreadPlan(cores, decode, f"{cores} cores, all to inference (costs not measured)")
    if costs.feed_ms is None:
        return ThreadPlan(cores - 1, decode, f"{cores} cores, one kept for decoding a live "
                          f"source (inference {costs.infer_ms:.1f} ms/frame on 1 thread)")
    share = costs.feed_ms / costs.infer_ms
    measured = (f"decode+preprocess {costs.feed_ms:.1f} ms/frame, inference "
                f"{costs.infer_ms:.1f} ms/frame on 1 thread")
    if share >= COMPARABLE:
        if decode_threads is None:
            decode = _decoder_threads(costs.feed_ms, costs.infer_ms, costs.streams, cores)
        return ThreadPlan(cores - 1, decode, f"{measured}: feeding costs as much, so "
                          f"{cores - 1} of {cores} cores to inference, one kept for "
                          f"decoding, {decode} decoder thread{'s' if decode > 1 else ''} "
                          f"per file")
    return ThreadPlan(cores, decode, f"{measured}: inference-bound, all {cores} cores to it")


def _decoder_threads(feed_ms: float, infer_ms: float, streams: int, cores: int) -> int:
    """FFmpeg threads per file when one of ``cores`` (>= 2) is kept for feeding ``streams``
    files that cost ``feed_ms`` per frame in all (see the module doc)."""
    streams = max(1, streams)
    per_file_ms = feed_ms / streams
    time_per_file_frame = streams * infer_ms / (cores - 1)
    if per_file_ms > FRAME_THREADS_FROM * time_per_file_frame:
        return max(1, cores // streams)
    return 1
