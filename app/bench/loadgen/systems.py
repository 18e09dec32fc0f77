"""The two systems under test LoadGen drives, each answering a query sample with the boxes
of its frame (an (N, 6) float32 array: x1, y1, x2, y2, score, class).

``EngineSUT`` is vidpipe's detector as the pipeline runs it — the engine's own inference
(preparing each call's frames on its worker, batching across whatever is waiting, the
thread plan's calls at once, double-buffered), postprocessing and sink stages
(``pipelines.wiring.detector_stages``, the stages the pipeline and the service's shared
detector both build, here with the pipeline's settings: the plan's calls, one call queued,
the options' batch wait), on the device and runtime the options name; LoadGen's samples go
in where decoded frames would.
``HandLoopSUT`` is the loop people write by hand (``app.bench.handloop``'s structure): one
thread, one frame at a time, letterbox -> ONNX Runtime -> box decoding and NMS.

LoadGen calls ``issue`` from its own threads; each answer is handed back with
``QuerySamplesComplete`` from the thread that finished it.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.loadgen.library import SampleLibrary
from models.spec import ModelSpec
from pipelines.backends import open_backends
from pipelines.channel import Channel
from pipelines.frame import Detections, Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.pipeline import Pipeline
from pipelines.wiring import counted_channel, detector_stages

STREAM = "loadgen"


def _lg() -> Any:
    import mlperf_loadgen

    return mlperf_loadgen


def _boxes(detections: Detections) -> np.ndarray:
    return np.concatenate([detections.xyxy, detections.score[:, None],
                           detections.class_id[:, None].astype(np.float32)],
                          axis=1).astype(np.float32)


class _Answers:
    """Completes samples with LoadGen and keeps each sample index's last boxes (accuracy)."""

    def __init__(self) -> None:
        self.boxes: dict[int, np.ndarray] = {}
        self.completed = 0

    def complete(self, response_id: int, index: int, boxes: np.ndarray) -> None:
        lg = _lg()
        self.boxes[index] = boxes
        self.completed += 1
        data = boxes.tobytes()
        buffer = np.frombuffer(data, np.uint8)
        pointer = buffer.ctypes.data if len(buffer) else 0
        lg.QuerySamplesComplete([lg.QuerySampleResponse(response_id, pointer, len(buffer))])


class EngineSUT:
    name = "vidpipe"

    def __init__(self, model_path: Path, spec: ModelSpec, library: SampleLibrary,
                 options: PipelineOptions) -> None:
        self.library, self.answers = library, _Answers()
        self.metrics = PipelineMetrics()
        self.backends = open_backends(model_path, spec, [], self.metrics, options, scale=None)
        plan = self.backends.plan
        assert plan.batch_size is not None  # fitted by open_backends
        runtime = plan.runtime.runtime if plan.runtime is not None else options.runtime
        self.describe = f"{runtime} on {options.device}, batches up to {plan.batch_size}, " \
                        f"{plan.threads.infer_workers} calls at once"
        self._sent: dict[int, tuple[int, int]] = {}  # frame index -> (response id, sample)
        self._count = 0
        channels: list[Channel[Any]] = []

        def channel(name: str) -> Channel[Any]:
            channels.append(counted_channel(self.metrics, f"loadgen/{name}", options.capacity))
            return channels[-1]

        self._queries = channel("queries")
        stages = detector_stages(self._queries, self.backends, spec, self.metrics, options,
                                 channel=channel, sinks=[_CompletingSink(self)],
                                 batch_size=plan.batch_size,
                                 infer_calls=plan.threads.infer_workers, prepare=True,
                                 postprocess_calls=plan.threads.infer_workers, queued=1)
        self._pipeline = Pipeline(stages, channels, self.metrics, [STREAM], plan=plan)
        self._loop = asyncio.new_event_loop()
        self._waiting: asyncio.Queue[list[Any] | None] | None = None
        self._thread = threading.Thread(target=self._serve, name="loadgen-engine", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._run())

    async def _run(self) -> None:
        self._waiting = asyncio.Queue()
        self._started.set()
        feeder = asyncio.create_task(self._feed())
        try:
            await self._pipeline.run()
        finally:
            feeder.cancel()

    async def _feed(self) -> None:
        """Queries into the engine in the order issued, as fast as its queue takes them."""
        assert self._waiting is not None
        while True:
            samples = await self._waiting.get()
            if samples is None:
                self._queries.close()
                return
            for sample in samples:
                index = self._count
                self._count += 1
                self._sent[index] = (sample.id, sample.index)
                self.metrics.frame_received(STREAM)
                await self._queries.put(Frame(STREAM, index, None, time.monotonic(),
                                              self.library.images[sample.index]))

    def issue(self, samples: list[Any]) -> None:
        assert self._waiting is not None
        self._loop.call_soon_threadsafe(self._waiting.put_nowait, list(samples))

    def flush(self) -> None:
        pass

    def written(self, result: Result) -> None:
        response_id, index = self._sent.pop(result.frame.index)
        self.answers.complete(response_id, index, _boxes(result.detections))

    def close(self) -> None:
        if self._thread.is_alive():
            assert self._waiting is not None
            self._loop.call_soon_threadsafe(self._waiting.put_nowait, None)
            self._thread.join(timeout=60)
        self._pipeline.close()
        self._loop.close()


class _CompletingSink:
    """The engine's sink: each result completes its sample."""

    wants_images = False

    def __init__(self, sut: EngineSUT) -> None:
        self.sut = sut

    def write(self, result: Result) -> None:
        self.sut.written(result)

    def close(self, commit: bool = True) -> None:
        pass


class HandLoopSUT:
    name = "hand loop"

    def __init__(self, model_path: Path, spec: ModelSpec, library: SampleLibrary) -> None:
        import onnxruntime as ort

        from pipelines.postprocess.yolo import decode_outputs
        from pipelines.preprocess.opencv import OpenCVPreprocessor

        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_path), options,
                                             providers=["CPUExecutionProvider"])
        self._input = spec.input.name or self._session.get_inputs()[0].name
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._prepare = OpenCVPreprocessor(spec.input).prepare
        self._decode = decode_outputs
        self._spec, self.library, self.answers = spec, library, _Answers()
        self.describe = f"onnxruntime, one frame at a time, {options.intra_op_num_threads} " \
                        "threads"
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="loadgen-hand", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        size = (self._spec.input.width, self._spec.input.height)
        while (sample := self._queue.get()) is not None:
            frame = Frame("hand", sample.index, None, time.monotonic(),
                          self.library.images[sample.index])
            batch = self._prepare(frame)
            values = self._session.run(self._outputs, {self._input: batch.tensor})
            found = self._decode(dict(zip(self._outputs, values, strict=True)),
                                 batch.letterboxes, self._spec.output, size,
                                 self._spec.num_classes)[0]
            self.answers.complete(sample.id, sample.index, _boxes(found))

    def issue(self, samples: list[Any]) -> None:
        for sample in samples:
            self._queue.put(sample)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)
