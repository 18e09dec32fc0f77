"""How many threads ONNX Runtime and FFmpeg get, decided from measured costs, not assumed.

Decoding, preprocessing and inference share the same cores, and ONNX Runtime's intra-op
threads meet at a barrier after every operator: when a decoder takes one of "its" cores, the
whole operator waits for the preempted thread. The rules (the measurements behind each are
in docs/BENCHMARKS.md, "The thread plan"):

- Before a pipeline starts, ``measure_costs`` times inference per frame on one thread (a
  blank image, median of a few calls) and decoding plus preprocessing per frame of each file
  (its first frames, in a separate reader, decoded as the pipeline will; the first picture,
  which carries the decoder's start-up, untimed).
- Cores for inference: ``cores - 1`` (at least one) when preparing costs at least
  ``COMPARABLE`` times inference per frame, so a core is kept for decoding; all of them
  otherwise. A live source cannot be probed ahead, so a core is kept for it.
- Calls at once: the inference threads are split into ``INFER_WORKERS`` calls at once, each
  on half of them, when they split evenly: a call on one thread is not stalled by a
  preempted second thread. Live sources keep one call at a time.
- Decoder threads: one per file, unless one thread would take more than
  ``FRAME_THREADS_FROM`` times the time inference has for that file's frames; then
  ``cores // files`` (frame threading costs CPU of its own, which shared cores take from
  inference). A live source always decodes on one thread: each extra frame thread holds a
  frame interval of latency.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from models.backends.base import Backend
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.errors import ModelError
from models.spec import InputSpec, ModelSpec
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.errors import DecodeError
from pipelines.frame import Frame
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.sources.media import METADATA_ERRORS

log = logging.getLogger(__name__)

COMPARABLE = 1.0  # decode + preprocess / inference per frame from which a core is kept
INFER_WORKERS = 2  # inference calls at once, when the inference threads split evenly
FRAME_THREADS_FROM = 2.0  # a file's decoding / inference's time for its frames: more threads
PROBE_FRAMES = 8


@dataclass(frozen=True, slots=True)
class StageCosts:
    infer_ms: float  # per frame, one inference thread, batch 1
    prepare_ms: float | None  # decode + preprocess per frame, summed over the streams (None: live)
    streams: int = 1  # file streams fed (decoder threads are shared out between them)


@dataclass(frozen=True, slots=True)
class ThreadPlan:
    infer: int  # ONNX Runtime intra-op threads of each inference call
    decode: int  # FFmpeg threads per file
    reason: str
    infer_workers: int = 1  # inference calls at once (batches in flight), each on ``infer``


@dataclass(frozen=True, slots=True)
class ProbeTime:
    """What a probe measured per frame: wall time, and the process's CPU time over the same
    calls (all its threads: more than the wall time when several threads worked)."""

    wall_ms: float
    cpu_ms: float


def time_infer(model: Path, shape: Sequence[int], dtype: str = "float32", calls: int = 3, *,
               threads: int = 1, batch: int = 1, workers: int = 1,
               backend: Backend | None = None) -> ProbeTime:
    """Per frame, over ``calls`` ONNX Runtime calls (``threads`` intra-op threads each) on a
    blank batch of ``batch`` images of ``shape``, ``workers`` calls at once from as many
    threads: the wall time (with one worker from the median call, with several from the
    whole run) and the mean CPU time. ``backend``: an opened session to time (left open)
    instead of a new one of ``model``."""
    if backend is not None:
        return _time_calls(backend, shape, dtype, calls, batch, workers)
    with OnnxRuntimeBackend(model, threads=threads) as opened:
        return _time_calls(opened, shape, dtype, calls, batch, workers)


def _time_calls(backend: Backend, shape: Sequence[int], dtype: str, calls: int, batch: int,
                workers: int) -> ProbeTime:
    feeds = {backend.inputs[0].name: np.zeros((batch, *shape), dtype=dtype)}
    backend.infer(feeds)  # first call: allocation and kernel selection
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda _: backend.infer(feeds), range(workers)))  # warm each
            start, cpu_start = time.perf_counter(), time.process_time()
            list(pool.map(lambda _: backend.infer(feeds), range(calls)))
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
        return ProbeTime(wall * 1e3 / (calls * batch), cpu * 1e3 / (calls * batch))
    times = []
    cpu_start = time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        backend.infer(feeds)
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu_start
    return ProbeTime(statistics.median(times) * 1e3 / batch, cpu * 1e3 / (calls * batch))


def measure_infer_ms(model: Path, shape: Sequence[int], dtype: str = "float32",
                     calls: int = 3, *, threads: int = 1, batch: int = 1,
                     backend: Backend | None = None) -> float:
    """Median ms per frame of ``calls`` ONNX Runtime calls (see ``time_infer``)."""
    return time_infer(model, shape, dtype, calls, threads=threads, batch=batch,
                      backend=backend).wall_ms


def time_prepare(path: Path, spec: InputSpec, frames: int | None = PROBE_FRAMES, *,
              threads: int = 1, scaled: bool = True) -> ProbeTime | None:
    """Per frame, to decode (``threads`` FFmpeg threads; ``scaled``: straight to the model's
    letterbox size, as a pipeline without image sinks does) and preprocess the first
    ``frames`` of a file (None: all of it); None when the file gives fewer than two frames
    (the pipeline will say why). The first picture is decoded but not timed: it carries the
    decoder's start-up, several times a later picture's cost (docs/BENCHMARKS.md)."""
    prepare = OpenCVPreprocessor(spec)
    try:
        with av.open(str(path), metadata_errors=METADATA_ERRORS) as container:
            stream = container.streams.video[0]
            decoder = PyAVDecoder(stream, threads=threads,
                                  scale=ScaleTo.for_input(spec) if scaled else None)
            done, start, cpu_start = 0, 0.0, 0.0
            for packet in container.demux(stream):
                for picture in decoder.decode(packet):
                    prepare.prepare(Frame("probe", done, None, 0.0, picture.image,
                                          source_size=picture.source_size))
                    done += 1
                    if done == 1:  # the clock starts once the decoder is up
                        start, cpu_start = time.perf_counter(), time.process_time()
                if frames is not None and done >= frames:
                    break
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    except (av.FFmpegError, DecodeError, OSError, IndexError):
        return None
    timed = done - 1
    return ProbeTime(elapsed * 1e3 / timed, cpu * 1e3 / timed) if timed >= 1 else None


def measure_prepare_ms(path: Path, spec: InputSpec, frames: int | None = PROBE_FRAMES, *,
                    threads: int = 1, scaled: bool = True) -> float | None:
    """ms per frame to decode and preprocess a file's first frames (see ``time_prepare``)."""
    probe = time_prepare(path, spec, frames, threads=threads, scaled=scaled)
    return None if probe is None else probe.wall_ms


def choose_threads(infer_threads: int | None, decode_threads: int | None, cores: int,
                   costs: StageCosts | None = None) -> ThreadPlan:
    """How many threads ONNX Runtime and each FFmpeg decoder get: the given ones, else from
    the measured stage costs."""
    return plan_threads(costs, cores, infer_threads=infer_threads,
                        decode_threads=decode_threads)


def measure_costs(model_path: Path, spec: ModelSpec, sources: Sequence[Any], *,
                  scaled: bool = True, backend: Backend | None = None) -> StageCosts:
    """Inference per frame on one thread (``backend``: an opened one-thread session, else a
    new one), and decode (``scaled``: to the model's size) + preprocess per frame summed
    over the sources (None if any is live: a camera cannot be read ahead)."""
    infer_ms = measure_infer_ms(model_path, spec.input.image_shape, spec.input.dtype,
                                backend=backend)
    prepare: float | None = 0.0
    for source in sources:
        path = getattr(source, "path", None)
        cost = (None if source.live or path is None
                else measure_prepare_ms(path, spec.input, scaled=scaled))
        prepare = None if cost is None or prepare is None else prepare + cost
    return StageCosts(infer_ms, prepare, max(1, len(sources)))


def probe_costs(model_path: Path, spec: ModelSpec, sources: Sequence[Any], *,
                scaled: bool = True, backend: Backend | None = None) -> StageCosts | None:
    """``measure_costs``, or None when the probe cannot run the model (a model that does not
    match its card fails right after, in ``check_compatible``, with the message that says so)."""
    try:
        return measure_costs(model_path, spec, sources, scaled=scaled, backend=backend)
    except ModelError:
        raise
    except Exception as e:  # ONNX Runtime raises its own untyped errors for a bad feed
        log.warning("could not measure stage costs (%s); threads from the core count",
                    str(e).splitlines()[0][:160])
        return None


def plan_threads(costs: StageCosts | None, cores: int, *, infer_threads: int | None = None,
                 decode_threads: int | None = None) -> ThreadPlan:
    """The thread plan for ``cores`` given the measured ``costs`` (see the module doc)."""
    decode = decode_threads if decode_threads is not None else 1  # 0: FFmpeg's own choice
    if infer_threads is not None:
        return ThreadPlan(infer_threads, decode, "given")
    if cores <= 1:
        return ThreadPlan(1, decode, "1 core")
    if costs is None:
        return _split(cores, decode, f"{cores} cores, all to inference (costs not measured)")
    if costs.prepare_ms is None:  # one call at a time: no result waits behind the next frame
        return ThreadPlan(cores - 1, decode, f"{cores} cores, one kept for decoding a live "
                          f"source (inference {costs.infer_ms:.1f} ms/frame on 1 thread)")
    share = costs.prepare_ms / costs.infer_ms
    measured = (f"decode+preprocess {costs.prepare_ms:.1f} ms/frame, inference "
                f"{costs.infer_ms:.1f} ms/frame on 1 thread")
    if share >= COMPARABLE:
        if decode_threads is None:
            decode = _decoder_threads(costs.prepare_ms, costs.infer_ms, costs.streams, cores)
        return _split(cores - 1, decode, f"{measured}: preparing costs as much, so "
                      f"{cores - 1} of {cores} cores to inference, one kept for "
                      f"decoding, {decode} decoder thread{'s' if decode > 1 else ''} per file")
    return _split(cores, decode, f"{measured}: inference-bound, all {cores} cores to it")


def _split(threads: int, decode: int, reason: str) -> ThreadPlan:
    """``threads`` inference threads as ``INFER_WORKERS`` calls at once when they split
    evenly, else as one call on all of them (see the module doc)."""
    if threads > 1 and threads % INFER_WORKERS == 0:
        per_call = threads // INFER_WORKERS
        return ThreadPlan(per_call, decode, f"{reason}, as {INFER_WORKERS} calls at once on "
                          f"{per_call} thread{'s' if per_call > 1 else ''} each",
                          INFER_WORKERS)
    return ThreadPlan(threads, decode, reason)


def _decoder_threads(prepare_ms: float, infer_ms: float, streams: int, cores: int) -> int:
    """FFmpeg threads per file when one of ``cores`` (>= 2) is kept for preparing ``streams``
    files that cost ``prepare_ms`` per frame in all (see the module doc)."""
    streams = max(1, streams)
    per_file_ms = prepare_ms / streams
    time_per_file_frame = streams * infer_ms / (cores - 1)
    if per_file_ms > FRAME_THREADS_FROM * time_per_file_frame:
        return max(1, cores // streams)
    return 1


def planned_session(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                    infer_threads: int | None, decode_threads: int | None, *,
                    scaled: bool = True) -> tuple[OnnxRuntimeBackend, ThreadPlan]:
    """The model's session on the plan's threads, and the plan. The plan's probe times
    inference on a one-thread session; where the plan wants one thread per call (two calls at
    once on two cores, or a core kept for decoding), that session is the run's: the model is
    opened once. Without sources (a shared detector, before its streams) nothing is probed:
    the plan is the inference-bound one a probe would find."""
    cores = os.cpu_count() or 1
    if infer_threads is not None or cores == 1 or not sources:
        plan = choose_threads(infer_threads, decode_threads, cores)
        session = OnnxRuntimeBackend(model_path, threads=plan.infer)
    else:
        session = OnnxRuntimeBackend(model_path, threads=1)
        try:
            costs = probe_costs(model_path, spec, sources, scaled=scaled, backend=session)
            plan = choose_threads(None, decode_threads, cores, costs)
            if plan.infer != 1:
                session.close()
                session = OnnxRuntimeBackend(model_path, threads=plan.infer)
        except BaseException:
            session.close()
            raise
    log.info("threads: inference %d x %d at once, decode %d per stream (%s)", plan.infer,
             plan.infer_workers, plan.decode, plan.reason)
    return session, plan
