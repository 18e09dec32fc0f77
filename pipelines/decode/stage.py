"""DecodeStage: one per stream; pulls packets from a source, decodes them, emits Frames.

Every frame the stream delivers is counted as received here, and every one that fails to
decode is counted as ``decode_error`` here, so the rest of the pipeline only has to account for
the frames it was given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import av
import torch

from pipelines.channel import Channel
from pipelines.decode.pyav import DecodedPicture
from pipelines.errors import DecodeError
from pipelines.frame import Frame
from pipelines.metrics import PipelineMetrics
from pipelines.stage import Stage

log = logging.getLogger(__name__)


FILE_READ_AHEAD = 4  # pictures per call to the decoder thread for a file source


class PacketSource(Protocol):
    """Where packets come from. ``epoch`` changes whenever the packets start coming from a new
    connection (an RTSP reconnect): the decoder is then made anew for the new stream."""

    stream_id: str
    live: bool

    @property
    def epoch(self) -> int: ...

    @property
    def frame_count(self) -> int | None: ...

    def packets(self) -> Iterator[av.Packet]: ...

    def arrival_time(self, pts: float | None) -> float | None:
        """When a live source received the frame shown at ``pts`` (monotonic seconds), or None
        when the moment of decoding is the frame's capture time (files)."""
        ...

    def close(self) -> None: ...


class PictureDecoder(Protocol):
    def decode(self, packet: av.Packet) -> list[DecodedPicture]: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class DecodeStep:
    """What one call into the decoder thread produced."""

    captured_at: float
    pictures: list[DecodedPicture] = field(default_factory=list)
    errors: int = 0
    ended: bool = False
    decode_s: float = 0.0  # time in the decoder: waiting for a live source's packets is not work


class DecodeStage(Stage):
    def __init__(self, source: PacketSource, make_decoder: Callable[[Any], PictureDecoder],
                 output: Channel[Frame], metrics: PipelineMetrics, *,
                 frame_limit: int | None = None, pictures_per_call: int | None = None) -> None:
        # A file is read ahead several pictures per call to the worker, so the decoder does
        # not sit idle while the event loop hands each one on; a live picture goes at once.
        if pictures_per_call is None:
            pictures_per_call = 1 if source.live else FILE_READ_AHEAD
        if pictures_per_call < 1:
            raise ValueError(f"pictures per call must be >= 1, got {pictures_per_call}")
        super().__init__("decode", metrics, worker_name=f"decode-{source.stream_id}")
        self.pictures_per_call = pictures_per_call
        self.source = source
        self._make_decoder = make_decoder
        self.decoder: PictureDecoder | None = None
        self._epoch = -1
        self.output = output
        self.stream_id = source.stream_id
        self.decoded = 0
        self.decode_errors = 0
        self.frame_limit = frame_limit
        self._packets: Iterator[av.Packet] | None = None

    async def run(self) -> None:
        index = 0
        # A file's next pictures are decoded while the event loop hands on the last ones: the
        # decoder thread does not wait for the loop between calls. A camera's are not: its read
        # blocks until the next frame, and one picture per call already goes at once.
        read_ahead = not self.source.live
        pending: asyncio.Future[tuple[DecodeStep, float]] | None = None
        try:
            while not self._stopping and not self._limit_reached():
                if pending is None:
                    pending = self._submit(self.decoded)
                step, _ = await pending
                pending = None
                after = self.decoded + len(step.pictures)
                if (read_ahead and not step.ended and not self._stopping
                        and (self.frame_limit is None or after < self.frame_limit)):
                    pending = self._submit(after)
                self.metrics.observe_stage(self.name, step.decode_s)
                seconds = step.decode_s
                for picture in step.pictures:
                    if self._limit_reached():
                        break
                    arrived = self.source.arrival_time(picture.pts)
                    captured_at = step.captured_at if arrived is None else arrived
                    image = picture.image if isinstance(picture.image, torch.Tensor) \
                        else torch.from_numpy(picture.image)
                    frame = Frame(self.stream_id, index, picture.pts, captured_at, image,
                                  ready=getattr(picture, "ready", None),
                                  timings={"decode": seconds / len(step.pictures)},
                                  source_size=getattr(picture, "source_size", None))
                    index += 1
                    self.decoded += 1
                    self.metrics.frame_received(self.stream_id)
                    await self.output.put(frame)
                self._count_errors(step.errors)
                index += step.errors
                if step.ended:
                    self._count_missing()
                    break
        finally:
            if pending is not None:  # pictures decoded ahead and never handed on: not received
                pending.cancel()
            self.output.close()

    def _submit(self, decoded: int) -> asyncio.Future[tuple[DecodeStep, float]]:
        """The next call to the decoder thread, once ``decoded`` pictures are accounted for."""
        wanted = self.pictures_per_call
        if self.frame_limit is not None:
            wanted = max(1, min(wanted, self.frame_limit - decoded))
        return asyncio.ensure_future(self.worker.run(self._step, wanted))

    def request_stop(self) -> None:
        """Stop reading now: the source's close() is thread-safe, and ends a wait for a live
        camera (a backoff, a silent read) that would otherwise hold the stop up."""
        super().request_stop()
        self.source.close()

    def _limit_reached(self) -> bool:
        return self.frame_limit is not None and self.decoded >= self.frame_limit

    def _step(self, wanted: int) -> DecodeStep:
        """On the decoder thread: read packets until ``wanted`` pictures came out, a packet
        fails, or the stream ends."""
        if self._packets is None:
            self._packets = self.source.packets()
        step = DecodeStep(captured_at=time.monotonic())
        for packet in self._packets:
            step.captured_at = time.monotonic()  # the packet is here: a live frame's capture
            decoder = self._current_decoder()
            start = time.perf_counter()
            try:
                step.pictures.extend(decoder.decode(packet))
            except DecodeError as e:
                log.debug("%s: %s", self.stream_id, e)
                step.errors += 1
            finally:
                step.decode_s += time.perf_counter() - start
            if len(step.pictures) >= wanted or step.errors:
                return step
        step.ended = True
        return step

    def _current_decoder(self) -> PictureDecoder:
        """The decoder for the source's current connection (made anew after a reconnect)."""
        if self.decoder is None or self.source.epoch != self._epoch:
            if self.decoder is not None:
                self.decoder.close()
            self.decoder = self._make_decoder(self.source)
            self._epoch = self.source.epoch
        return self.decoder

    def _count_errors(self, count: int) -> None:
        for _ in range(count):
            self.metrics.frame_received(self.stream_id)
        if count:
            self.decode_errors += count
            self.metrics.frame_outcome(self.stream_id, "decode_error", count)

    def _count_missing(self) -> None:
        """A truncated file declares more frames than it delivers: count the rest as errors."""
        declared = self.source.frame_count
        seen = self.decoded + self.decode_errors
        if declared is not None and declared > seen:
            missing = declared - seen
            log.warning("%s: %d of %d declared frames could not be decoded (truncated or "
                        "corrupt file); counted as decode_error", self.stream_id,
                        missing + self.decode_errors, declared)
            self._count_errors(missing)

    def close(self) -> None:
        super().close()
        if self.decoder is not None:
            self.decoder.close()
        self.source.close()
