"""DecodeStage: one per stream; pulls packets from a source, decodes them, emits Frames.
Every frame the stream delivers is counted as received here, and every one that fails to
decode as ``decode_error``: the rest of the pipeline accounts for the frames it was given.

A live stream whose decoding falls more than ``max_lag_s`` behind its camera (more cameras
than the cores can decode) skips to the next key frame, the frames it skipped counted as
``dropped_stale``: decoding them would only make every later frame as late, and the latency
of such a stream would grow without bound while a real camera keeps sending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import av

from pipelines.channel import Output
from pipelines.decode.lag import LagWatch
from pipelines.decode.motion import MotionGate, MotionMeter, MotionSettings
from pipelines.decode.picker import DetectionPicker
from pipelines.decode.picture import DecodedPicture
from pipelines.decode.selection import FrameSelection
from pipelines.decode.slots import DECODE_SLOTS, DecodeSlots
from pipelines.decode.timeline import StreamTimeline
from pipelines.errors import ChannelClosed, DecodeError
from pipelines.frame import Frame
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.pictures import KeepsPicture, keep_none
from pipelines.stage import Stage

log = logging.getLogger(__name__)

FILE_READ_AHEAD = 4  # frames handed on per call to the decoder thread for a file source
# the most pictures one call decodes while it has nothing to hand on (frames held for the
# next one the model sees): then it returns, empty, and the next call goes on
MOST_PICTURES_PER_CALL = 64


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
    """``decode(None)`` flushes (a file's end, or the end of a looped file's pass); a decoder
    with ``resumes_after_flush`` takes packets after, any other is made anew (NVDEC's:
    unverified, as all GPU code). One with ``export_motion`` gives motion gating the codec's
    vectors and its luma (``decode.motion``)."""

    def decode(self, packet: av.Packet) -> list[DecodedPicture]: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class DecodeStep:
    """What one call into the decoder thread produced: the frames it hands on (each carrying
    those before it the model does not see), its decode time, pictures made, packets failed."""

    frames: list[Frame] = field(default_factory=list)
    decode_s: float = 0.0  # time in the decoder: waiting for a live source's packets is not work
    made: int = 0  # pictures made frames of (received)
    failed: int = 0  # packets that could not be decoded


class DecodeStage(Stage[int, Frame]):
    """A source stage: each call asks the decoder thread for up to ``pictures_per_call``
    frames to hand on. The thread decodes, dates, counts and chooses them (``selection``):
    a frame the model is not to see stays there until it rides with one that goes on, so a
    quiet camera's frames cost the event loop one hand-off for a run of them
    (``FrameSelection``), not one each. A file is read ahead one call (its next pictures are
    decoded while the event loop hands on the last ones) and several frames per call; a
    camera's read blocks until its next frame, so it hands on one per call, no read-ahead."""

    def __init__(self, source: PacketSource, make_decoder: Callable[[Any], PictureDecoder],
                 output: Output[Frame], metrics: PipelineMetrics, *,
                 frame_limit: int | None = None, pictures_per_call: int | None = None,
                 max_lag_s: float | None = None, detect_every: int = 1,
                 detect_fps: float | None = None, rider_images: KeepsPicture = keep_none,
                 motion: MotionSettings | None = None,
                 slots: DecodeSlots = DECODE_SLOTS) -> None:
        """``slots``: the decodes at once this stage's thread takes its turn among (the
        process's, by default)."""
        if pictures_per_call is None:
            pictures_per_call = 1 if source.live else FILE_READ_AHEAD
        if pictures_per_call < 1:
            raise ValueError(f"pictures per call must be >= 1, got {pictures_per_call}")
        super().__init__("decode", metrics, input=None, output=output,
                         worker_name=f"decode-{source.stream_id}", call_ahead=not source.live)
        self.pictures_per_call, self.source, self.frame_limit = (pictures_per_call, source,
                                                                 frame_limit)
        self._make_decoder = make_decoder
        self.slots = slots
        self.decoder: PictureDecoder | None = None
        self._epoch = -1
        self.stream_id = source.stream_id
        self.decoded = self.decode_errors = 0  # pictures made frames of (received); failed
        self._packets: Iterator[av.Packet] | None = None
        self._index = 0  # the next frame's index: pictures and errors both count
        self._ended = False
        if max_lag_s is not None and max_lag_s <= 0:
            raise ValueError(f"max lag must be > 0 s, got {max_lag_s}")
        self.max_lag_s = max_lag_s if source.live else None
        # the source's own method: a closure over this stage would be a reference cycle,
        # keeping a removed stream's decoder until the cycle collector ran
        self.lag = LagWatch(source.stream_id, self.max_lag_s, source.arrival_time)
        self.skipped = 0  # packets skipped to catch up with the camera
        self.timeline = StreamTimeline(float(getattr(source, "fps", 0) or 30.0))
        # motion gating: measured on the decoder thread, decided as frames are handed on
        self.meter = None if motion is None else MotionMeter(motion.mode, motion.masks,
                                                             source.stream_id)
        # --detect-every N, --detect-fps F, --motion: the frames for the model each carry
        # those before them as riders (pixels released unless a sink draws on them)
        self.selection = FrameSelection(
            DetectionPicker(detect_every, detect_fps),
            None if motion is None else MotionGate(motion.heartbeat_s, motion.watch),
            rider_images, waits_for_news=not source.live)

    async def next_items(self) -> list[int]:
        """How many frames the next call is to hand on; ChannelClosed once the stream ended,
        the frame limit is reached or a stop was asked for."""
        if self._ended or self._stopping or self._limit_reached():
            if self.selection.holding:
                return [0]  # one last call: the frames held back for the next detected one
            raise ChannelClosed(f"{self.stream_id}: no more pictures")
        return [self.pictures_per_call]

    def process(self, items: list[int]) -> DecodeStep:
        if items[0] == 0:
            return DecodeStep(self.selection.release(self.timeline.step))
        return self._step(items[0])

    def work_seconds(self, result: DecodeStep, seconds: float) -> float:
        return result.decode_s  # waiting for a live source's packets is not work

    def outputs(self, items: list[int], result: DecodeStep,
                seconds: float) -> list[Frame]:
        """The call's frames, already counted as received on the decoder thread (a call
        under way when a stop was asked for still hands on what it made: a drained stop
        loses nothing)."""
        return result.frames

    def _frame(self, index: int, picture: DecodedPicture, captured_at: float,
               decode_s: float) -> Frame:
        """A picture as the stream's frame ``index``: captured when its camera sent it (when
        decoded, for a file), on the stream's timeline (a gap before it counted)."""
        arrived = self.source.arrival_time(picture.pts)
        captured = captured_at if arrived is None else arrived
        pts, gap = self.timeline.at(picture.pts, self._epoch, captured)
        if gap is not None:
            self.metrics.count_gap(self.stream_id, gap)
        return Frame(self.stream_id, index, pts, captured, picture.image, ready=picture.ready,
                     timings={"decode": decode_s}, source_size=picture.source_size,
                     load=picture.load, gap_s=gap)

    def request_stop(self) -> None:
        """Stop reading now: the source's close() is thread-safe, and ends a wait for a live
        camera (a backoff, a silent read) that would otherwise hold the stop up."""
        super().request_stop()
        self.source.close()

    def _limit_reached(self) -> bool:
        return self.frame_limit is not None and self.decoded >= self.frame_limit

    def _step(self, wanted: int) -> DecodeStep:
        """On the decoder thread: read packets until ``wanted`` frames are chosen to hand on,
        a packet fails, the stream ends or the frame limit is reached, or
        ``MOST_PICTURES_PER_CALL`` pictures were decoded with nothing to hand on. Every
        picture is counted as received here (the call's together), every failed packet as
        ``decode_error``, every packet skipped to catch up as ``dropped_stale``."""
        if self._packets is None:
            self._packets = self.source.packets()
        step = DecodeStep()
        if self.selection.waiting:  # what it handed on, through to its results; no slot held
            self.metrics.wait_settled(self.stream_id, self.selection.held,
                                      lambda: self._stopping or self._ended)
            step.frames += self.selection.resume(self.timeline.step)
        try:
            for packet in self._packets:
                captured = time.monotonic()  # the packet is here: a live frame's capture
                if self.lag.behind(packet, captured):
                    self._index += 1
                    self._count_skipped(1)
                    continue
                if not self._take(packet, captured, step):
                    return step
                if len(step.frames) >= wanted or step.made >= MOST_PICTURES_PER_CALL \
                        or self.selection.waiting or self._limit_reached():
                    return step
            self._ended = True
            self._count_missing()
            return step
        finally:
            self._index += step.failed
            self._count_errors(step.failed)
            if step.made:
                self.metrics.frame_received(self.stream_id, step.made)

    def _take(self, packet: Any, captured: float, step: DecodeStep) -> bool:
        """In turn with the other decoder threads (``slots``): the packet read at
        ``captured`` decoded, its pictures dated, counted and chosen into ``step``. False
        when the call ends here: the packet failed, or the frame limit was reached."""
        with self.slots:
            start = time.perf_counter()
            try:
                pictures = self._decode(packet)
            except DecodeError as e:
                log.debug("%s: %s", self.stream_id, e)
                step.failed = 1
                return False
            finally:
                spent = time.perf_counter() - start
                step.decode_s += spent
            for picture, motion in pictures:
                if self._limit_reached():
                    return False  # past the limit: not received
                step.made += 1
                self.decoded += 1
                frame = self._frame(self._index, picture, captured, spent / len(pictures))
                self._index += 1
                step.frames += self.selection.select(frame, motion, self.timeline.step)
        return True

    def _decode(self, packet: Any) -> list[tuple[DecodedPicture, float | None]]:
        """The pictures a packet completes, each with its motion where the stream is gated."""
        decoder = self._current_decoder()
        try:
            pictures = decoder.decode(packet)
        finally:
            if packet is None and not getattr(decoder, "resumes_after_flush", False):
                decoder.close()  # flushed for good: a looped file's next pass gets a new one
                self.decoder = None
        if self.meter is None:
            return [(p, None) for p in pictures]
        return [(p, self.meter.measure(p)) for p in pictures]

    def _count_skipped(self, count: int) -> None:
        self.skipped += count
        self._count_lost(count, "dropped_stale")

    def _current_decoder(self) -> PictureDecoder:
        """The decoder for the source's current connection (made anew after a reconnect)."""
        if self.decoder is None or self.source.epoch != self._epoch:
            if self.decoder is not None:
                self.decoder.close()
            self.decoder = self._make_decoder(self.source)
            self._epoch = self.source.epoch
            if self.meter is not None:
                self.meter.prepare(self.decoder)
        return self.decoder

    def _count_errors(self, count: int) -> None:
        self.decode_errors += count
        self._count_lost(count, "decode_error")

    def _count_lost(self, count: int, cause: str) -> None:
        """``count`` frames received and lost to ``cause``."""
        if count:
            self.metrics.frame_received(self.stream_id, count)
            self.metrics.frame_outcome(self.stream_id, cause, count)

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
        self._ended = True  # first: a thread waiting for results stops waiting
        super().close()
        if self.decoder is not None:
            self.decoder.close()
        self.source.close()
