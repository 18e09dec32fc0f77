"""What ``vidpipe bench --overhead`` runs the engine on: a null detector (an ONNX graph that
answers no box, made here), a clip's pictures decoded once and replayed from memory as a
stream (``MemorySource`` and its ``MemoryDecoder``), and the CPU time of each of the
process's threads (``ThreadClock``), so the engine's own cost shows stage by stage."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from models.spec import ModelSpec
from pipelines.decode.picture import DecodedPicture
from pipelines.decode.pyav import PyAVDecoder, ScaleTo
from pipelines.sources.file import FileSource

CLOCK_THREAD = "overhead-clock"
NULL_SIZE = 64  # the null detector's input: small, so preparing it costs little
NULL_ANCHORS = 16  # candidate boxes it answers, every one scored 0
NULL_CARD = {
    "name": "null", "file": "model.onnx",
    "input": {"name": "images", "width": NULL_SIZE, "height": NULL_SIZE, "layout": "NCHW",
              "dtype": "float32", "resize": "letterbox", "interpolation": "bilinear"},
    "output": {"format": "yolov8", "score_threshold": 0.25},
    "classes": ["thing"],
}


def null_model(folder: Path) -> tuple[Path, ModelSpec]:
    """An ONNX detector (yolov8 layout, one class) whose every candidate scores 0: the
    engine's every stage runs, and no box comes out. Its answer depends on the input (a
    maximum times zero), so no runtime can fold the graph away."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["images"], ["peak"], axes=[1, 2, 3], keepdims=1),
         helper.make_node("Mul", ["peak", "zero"], ["nothing"]),
         helper.make_node("Reshape", ["nothing", "flat"], ["column"]),
         helper.make_node("Expand", ["column", "shape"], ["output0"])],
        "null",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                       ["batch", 3, NULL_SIZE, NULL_SIZE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT,
                                       ["batch", 5, NULL_ANCHORS])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
         helper.make_tensor("flat", TensorProto.INT64, [3], [-1, 1, 1]),
         helper.make_tensor("shape", TensorProto.INT64, [3], [1, 5, NULL_ANCHORS])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path, ModelSpec.model_validate(NULL_CARD)


def decode_once(clip: Path, spec: ModelSpec, motion: bool) -> tuple[list[DecodedPicture],
                                                                     float, tuple[int, int]]:
    """Every picture of ``clip`` as the CPU decoder hands it on (shrunk to the model's
    letterbox, made at once; with ``motion``, with the codec's vectors and luma), its frame
    rate and its size."""
    with FileSource(clip, "once") as source:
        decoder = PyAVDecoder(source.video, threads=1, scale=ScaleTo.for_input(spec.input))
        if motion:
            decoder.export_motion(True)
        pictures = [p for packet in source.packets() for p in decoder.decode(packet)]
        for picture in pictures:  # not lazy: each picture made at once
            if picture.motion is not None and picture.motion.luma is not None:
                picture.motion.luma = picture.motion.luma.copy()  # FFmpeg's buffer is reused
        decoder.close()
        return pictures, source.fps, source.size


class MemorySource:
    """A stream that replays pictures decoded once, ``frames`` of them, as a file would
    (not live: as fast as the engine takes them). Its packets are the pictures' numbers."""

    live = False
    epoch = 0

    def __init__(self, stream_id: str, pictures: list[DecodedPicture], fps: float,
                 size: tuple[int, int], frames: int) -> None:
        self.stream_id, self.pictures, self.fps, self.size = stream_id, pictures, fps, size
        self.frames = frames
        self._closed = threading.Event()

    @property
    def frame_count(self) -> int | None:
        return self.frames

    def packets(self) -> Iterator[int | None]:
        for index in range(self.frames):
            if self._closed.is_set():
                return
            yield index
        yield None

    def arrival_time(self, pts: float | None) -> float | None:
        return None

    def close(self) -> None:
        self._closed.set()


class MemoryDecoder:
    """Hands picture ``n`` of a ``MemorySource`` on, its pts running on past the stored ones."""

    resumes_after_flush = True

    def __init__(self, source: MemorySource) -> None:
        self.source = source

    def export_motion(self, vectors: bool) -> None:
        """The stored pictures carry what they were decoded with."""

    def decode(self, packet: int | None) -> list[DecodedPicture]:
        if packet is None:
            return []
        stored = self.source.pictures[packet % len(self.source.pictures)]
        return [DecodedPicture(stored.image, packet / self.source.fps, stored.source_size,
                               motion=stored.motion)]

    def close(self) -> None:
        """Nothing held."""


def _thread_cpu_ns(tid: int) -> int | None:
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # the thread has ended


def thread_group(name: str) -> str:
    """The engine's part a thread works for, from its name: ``vidpipe-decode-s0_0`` is
    decode; the main thread runs the event loop (hand-offs, the books)."""
    if name == "MainThread":
        return "event loop"
    if name == CLOCK_THREAD:
        return CLOCK_THREAD
    if name.startswith("vidpipe-"):
        part = name.removeprefix("vidpipe-").split("_")[0]
        return part.split("-")[0]
    return "other"


class ThreadClock:
    """CPU time of the process's threads by part (``thread_group``), sampled every 50 ms on
    a thread of its own, so threads that end between two samples lose at most that much:
    ``totals()`` gives seconds per part since the clock started. Threads without a Python
    name (ONNX Runtime's pool) count as ``other``."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[str, int]] = {}
        self._start: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=CLOCK_THREAD, daemon=True)
        self.sample()
        self._start = {tid: ns for tid, (_, ns) in self._seen.items()}

    def sample(self) -> None:
        """Read every thread's CPU time now (before the pipeline's threads end, too)."""
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
        for entry in os.listdir("/proc/self/task"):
            tid = int(entry)
            ns = _thread_cpu_ns(tid)
            if ns is not None:
                self._seen[tid] = (thread_group(names.get(tid, "")), ns)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def __enter__(self) -> ThreadClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def totals(self) -> dict[str, float]:
        parts: dict[str, float] = {}
        for tid, (group, ns) in self._seen.items():
            if group != CLOCK_THREAD:
                parts[group] = parts.get(group, 0.0) + (ns - self._start.get(tid, 0)) / 1e9
        return parts
