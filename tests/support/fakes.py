"""Fakes for what a test is not about: a source and decoder that take a fixed time per frame,
and a backend that sleeps instead of computing. Written here, not patched into real parts."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from models.backends.base import TensorInfo
from models.spec import InputSpec, ModelSpec, OutputSpec
from pipelines.decode.picture import DecodedPicture

FAKE_SPEC = ModelSpec(
    name="fake", input=InputSpec(width=32, height=32, layout="NHWC", dtype="uint8"),
    output=OutputSpec(format="ssd", names={"boxes": "boxes", "scores": "scores",
                                           "classes": "classes"}),
    classes=["thing"],
)


class FakeSource:
    """``frames`` packets; packet i is just the int i."""

    live = False
    epoch = 0

    def __init__(self, stream_id: str, frames: int, *, declared: int | None = None) -> None:
        self.stream_id = stream_id
        self.frames = frames
        self.frame_count = declared if declared is not None else frames
        self.closed = False

    def packets(self) -> Iterator[int]:  # type: ignore[override]
        yield from range(self.frames)

    def arrival_time(self, pts: float | None) -> float | None:
        return None

    def close(self) -> None:
        self.closed = True


class FakeDecoder:
    """Sleeps ``seconds`` per packet and returns a 48x64 picture; packets in ``bad`` fail."""

    def __init__(self, seconds: float = 0.0, bad: frozenset[int] = frozenset()) -> None:
        self.seconds = seconds
        self.bad = bad

    def decode(self, packet: int) -> list[DecodedPicture]:  # type: ignore[override]
        from pipelines.errors import DecodeError

        if self.seconds:
            time.sleep(self.seconds)
        if packet in self.bad:
            raise DecodeError(f"packet {packet} is bad")
        image = np.full((48, 64, 3), packet % 256, dtype=np.uint8)
        return [DecodedPicture(image, packet / 30.0)]

    def close(self) -> None:
        pass


class FakeBackend:
    """An ssd-format model that finds one box per frame after sleeping ``seconds_per_frame``
    for each frame of a batch (so batching changes nothing about the cost, on purpose)."""

    def __init__(self, seconds_per_frame: float = 0.0, seconds_per_batch: float = 0.0) -> None:
        self.seconds_per_frame = seconds_per_frame
        self.seconds_per_batch = seconds_per_batch
        self.batch_sizes: list[int] = []
        self.closed = False

    @property
    def inputs(self) -> list[TensorInfo]:
        return [TensorInfo("image", (None, 32, 32, 3), "uint8")]

    @property
    def outputs(self) -> list[TensorInfo]:
        return [TensorInfo(n, (None, 1, 4), "float32") for n in ("boxes", "scores", "classes")]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = feeds["image"].shape[0]
        self.batch_sizes.append(n)
        time.sleep(self.seconds_per_batch + self.seconds_per_frame * n)
        return {
            "boxes": np.tile(np.array([[[0.25, 0.25, 0.75, 0.75]]], np.float32), (n, 1, 1)),
            "scores": np.full((n, 1), 0.9, np.float32),
            "classes": np.zeros((n, 1), np.float32),
        }

    def close(self) -> None:
        self.closed = True


class ListSink:
    """Keeps every result it is given; ``delay`` makes it a slow consumer."""

    wants_images = False

    def __init__(self, delay: float = 0.0) -> None:
        self.results: list = []
        self.delay = delay
        self.committed: bool | None = None

    def write(self, result) -> None:
        if self.delay:
            time.sleep(self.delay)
        self.results.append(result)

    def close(self, commit: bool = True) -> None:
        self.committed = commit


def run_source_stage(stage, out):
    """Run a source stage to its end, then close it; what it put into ``out``, in order."""
    import asyncio

    from pipelines.stage import run_stage

    async def run_and_drain():
        await run_stage(stage)
        return await drain(out)

    try:
        return asyncio.run(run_and_drain())
    finally:
        stage.close()


async def drain(channel):
    """Everything a channel still delivers, until it is closed and empty."""
    from pipelines.errors import ChannelClosed

    items = []
    while True:
        try:
            items.append(await channel.get())
        except ChannelClosed:
            return items
