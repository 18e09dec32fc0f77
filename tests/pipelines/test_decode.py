"""The CPU decoder and the decode stage: pictures straight at the model's size, read-ahead."""

from __future__ import annotations

import asyncio
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from models.spec import InputSpec
from pipelines.build import decoder_scale
from pipelines.channel import Channel
from pipelines.decode.pyav import PyAVDecoder, RGBConverter, ScaleTo
from pipelines.decode.stage import FILE_READ_AHEAD, DecodeStage
from pipelines.frame import Frame
from pipelines.geometry import Letterbox
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.stage import run_stage
from tests.support.fakes import (
    FAKE_SPEC,
    FakeDecoder,
    FakeSource,
    ListSink,
    run_source_stage,
)


def decode_all(clip: Path, scale: ScaleTo | None) -> list:
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        decoder = PyAVDecoder(stream, threads=1, scale=scale)
        return [p for packet in container.demux(stream) for p in decoder.decode(packet)]


@pytest.mark.parametrize("clip_name", ["small_clip", "wide_clip"])
@pytest.mark.parametrize("input_size", [(96, 96), (160, 128)], ids=["96x96", "160x128"])
def test_scaled_pictures_are_the_letterboxed_picture_of_the_full_one(
    clip_name: str, input_size: tuple[int, int], request: pytest.FixtureRequest
) -> None:
    clip = request.getfixturevalue(clip_name)
    full = decode_all(clip, None)
    scaled = decode_all(clip, ScaleTo(input_size))
    assert len(scaled) == len(full) > 0
    for big, small in zip(full, scaled, strict=True):
        h, w = big.image.shape[:2]
        assert small.source_size == (w, h) and big.source_size is None
        assert small.pts == big.pts
        size = Letterbox.fit((w, h), input_size).resized
        assert small.image.shape == (size[1], size[0], 3)
        # FFmpeg's filter is not OpenCV's: the same picture within a few levels on average
        reference = cv2.resize(big.image, size, interpolation=cv2.INTER_AREA
                               if min(size[0] / w, size[1] / h) < 0.5 else cv2.INTER_LINEAR)
        assert np.abs(small.image.astype(int) - reference).mean() < 4.0


def test_a_scaled_frame_is_prepared_like_the_full_frame(small_clip: Path) -> None:
    spec = InputSpec(width=96, height=96)
    full = decode_all(small_clip, None)[10]
    small = decode_all(small_clip, ScaleTo.for_input(spec))[10]
    prepare = OpenCVPreprocessor(spec)
    a = prepare.prepare(Frame("c", 0, None, 0.0, full.image))
    b = prepare.prepare(Frame("c", 0, None, 0.0, small.image,
                              source_size=small.source_size))
    assert a.letterboxes == b.letterboxes  # boxes map back to the same source pixels
    assert np.abs(a.tensor - b.tensor).mean() < 4.0 / 255


def test_frame_size_is_the_source_size_when_the_image_was_scaled() -> None:
    frame = Frame("c", 0, None, 0.0, np.zeros((180, 320, 3), np.uint8),
                  source_size=(1280, 720))
    assert frame.size == (1280, 720) and frame.image_size == (320, 180) and frame.scaled
    assert frame.without_image().size == (1280, 720)
    assert not Frame("c", 0, None, 0.0, np.zeros((4, 4, 3), np.uint8)).scaled
    with pytest.raises(ValueError, match="source_size must be"):
        Frame("c", 0, None, 0.0, None, source_size=(0, 720))


class _WantsImages(ListSink):
    wants_images = True


def test_pictures_are_decoded_full_size_when_a_sink_draws_on_them() -> None:
    spec = FAKE_SPEC
    assert decoder_scale(spec, [ListSink()], PipelineOptions()) == ScaleTo((32, 32))
    assert decoder_scale(spec, [ListSink(), _WantsImages()], PipelineOptions()) is None
    assert decoder_scale(spec, [ListSink()], PipelineOptions(decode_scaled=False)) is None


def test_ffmpegs_scaler_is_used_only_on_request(caplog) -> None:
    spec = FAKE_SPEC
    assert decoder_scale(spec, [ListSink()], PipelineOptions()).scaler == "opencv"
    fast = decoder_scale(spec, [ListSink()], PipelineOptions(ffmpeg_resize=True))
    assert fast == ScaleTo((32, 32), scaler="ffmpeg")
    assert "model sees other pixels" in caplog.text
    assert decoder_scale(spec, [_WantsImages()], PipelineOptions(ffmpeg_resize=True)) is None


class _LiveSource(FakeSource):
    live = True


@pytest.mark.parametrize(("source", "limit", "calls"), [
    (FakeSource("f", 10), None, -(-10 // FILE_READ_AHEAD)),  # the last finds the end too
    (FakeSource("f", 10), 6, 2),  # 4, then the 2 the limit leaves
    (_LiveSource("l", 10), None, 11),  # one per picture, then the call that finds the end
], ids=["file", "file-limit", "live"])
def test_files_are_read_ahead_and_live_pictures_go_at_once(source, limit, calls) -> None:
    metrics = PipelineMetrics()
    out: Channel[Frame] = Channel("decoded", 64)
    stage = DecodeStage(source, lambda s: FakeDecoder(), out, metrics, frame_limit=limit)
    frames = run_source_stage(stage, out)
    assert [f.index for f in frames] == list(range(limit or source.frames))
    assert metrics.stage_work["decode"].count == calls


class _CountingSource(FakeSource):
    """Counts the packets the decoder thread has read."""

    def __init__(self, stream_id: str, frames: int) -> None:
        super().__init__(stream_id, frames)
        self.read = 0

    def packets(self):  # type: ignore[override]
        for packet in super().packets():
            self.read += 1
            yield packet


class _CountingLiveSource(_CountingSource):
    live = True


@pytest.mark.parametrize(("source_type", "read"), [
    (_CountingSource, 2 * FILE_READ_AHEAD),  # the call in hand, and the next one decoded
    (_CountingLiveSource, 2),  # a camera: each picture read when the last one is handed on
], ids=["file", "live"])
def test_a_file_decodes_one_call_ahead_and_a_camera_does_not(source_type, read) -> None:
    # Nobody drains the channel: the first picture fills it and the second waits for room.
    source = source_type("f", 40)
    metrics = PipelineMetrics()
    out: Channel[Frame] = Channel("decoded", 1)
    stage = DecodeStage(source, lambda s: FakeDecoder(), out, metrics)

    async def main() -> tuple[int, int, int]:
        task = asyncio.create_task(run_stage(stage))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if source.read >= read:
                break
        await asyncio.sleep(0.05)  # time enough to read more, were it allowed to
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return source.read, len(out), metrics.received["f"]

    try:
        # received: every picture made a frame of on the decoder thread, the ones decoded
        # ahead too (a cancelled run counts those it never handed on as dropped_stopped)
        assert asyncio.run(main()) == (read, 1, read)
    finally:
        stage.close()


def test_sinks_that_draw_refuse_a_scaled_picture(tmp_path: Path) -> None:
    from pipelines.frame import Detections, Result
    from pipelines.sinks.snapshot import LatestFrameSink
    from pipelines.sinks.video import AnnotatedVideoSink

    frame = Frame("c", 0, None, 0.0, np.zeros((18, 32, 3), np.uint8),
                  source_size=(128, 72))
    result = Result(frame, Detections.empty())
    video = AnnotatedVideoSink(lambda s: tmp_path / f"{s}.mp4", lambda s: 30.0, FAKE_SPEC)
    with pytest.raises(ValueError, match=r"needs full pictures, got one decoded at \(32, 18\)"):
        video.write(result)
    video.close(commit=False)
    with pytest.raises(ValueError, match="needs full pictures"):
        LatestFrameSink(FAKE_SPEC, interval_s=0.0).write(result)


def test_pictures_per_call_must_be_positive() -> None:
    out: Channel[Frame] = Channel("decoded", 4)
    with pytest.raises(ValueError, match="pictures per call must be >= 1, got 0"):
        DecodeStage(FakeSource("f", 1), lambda s: FakeDecoder(), out, PipelineMetrics(),
                    pictures_per_call=0)


def test_the_kept_converter_gives_what_a_fresh_conversion_gives_across_size_changes() -> None:
    convert = RGBConverter(ScaleTo((96, 96)))
    full = RGBConverter()
    rng = np.random.default_rng(0)
    for width, height in [(320, 180), (128, 96), (320, 180), (64, 200)]:
        rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        image, source = convert.convert(frame)
        size = Letterbox.fit((width, height), (96, 96)).resized
        assert source == (width, height) and image.shape == (size[1], size[0], 3)
        fresh = cv2.resize(frame.to_ndarray(format="rgb24"), size,
                           interpolation=cv2.INTER_LINEAR)
        assert np.array_equal(image, fresh)
        image, source = full.convert(frame)
        assert source is None and np.array_equal(image, frame.to_ndarray(format="rgb24"))
