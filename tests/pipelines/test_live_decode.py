"""A live stream's decoding keeps up with its camera or catches up: pictures converted only
when prepared, a stream too far behind skips to the next key frame (counted), and a camera's
frames are dated by its own clock, so a backlog on the way shows as latency."""

from __future__ import annotations

import asyncio
import time

import av
import numpy as np
import pytest

from pipelines.channel import Channel
from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.stage import DecodeStage
from pipelines.metrics import PipelineMetrics
from pipelines.sources.clock import ArrivalClock
from pipelines.sources.paced import PacedFileSource
from pipelines.stage import run_stage
from pipelines.synthetic.rectangles import make_test_clip
from tests.support.fakes import drain


@pytest.fixture(scope="module")
def gop_clip(tmp_path_factory):
    """90 frames, a key frame every 15."""
    path = tmp_path_factory.mktemp("gop") / "gop.mp4"
    make_test_clip(path, frames=90, size=(320, 240))
    # re-encoded with a short GOP, as cameras send
    return _reencode(path, 30, {"g": "15", "bf": "0", "preset": "ultrafast"})


def _reencode(path, rate: int, options: dict[str, str]):
    """``path``'s frames encoded again in place, at ``rate`` with libx264 ``options``."""
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=rate, options=options)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for rgb in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        out.mux(stream.encode(None))
    return path


def test_lazy_pictures_are_the_eager_ones_and_only_converted_when_asked(gop_clip):
    with av.open(str(gop_clip)) as c:
        decoder = PyAVDecoder(c.streams.video[0], threads=1)
        eager = [p.image.copy() for packet in c.demux(video=0)
                 for p in decoder.decode(packet)]
    with av.open(str(gop_clip)) as c:
        decoder = PyAVDecoder(c.streams.video[0], threads=1, lazy=True)
        lazy = [p for packet in c.demux(video=0) for p in decoder.decode(packet)]
    assert len(lazy) == len(eager) == 90
    assert all(p.image is None and p.load is not None for p in lazy)
    for picture, expected in zip(lazy[::7], eager[::7], strict=True):
        assert np.array_equal(picture.load(), expected)


class _SlowDecoder:
    """A real decoder that takes ``seconds`` per packet: more cameras than cores."""

    def __init__(self, source, seconds: float) -> None:
        self.inner = PyAVDecoder(source.video, threads=1, lazy=True)
        self.seconds = seconds

    def decode(self, packet):
        time.sleep(self.seconds)
        return self.inner.decode(packet)

    def close(self) -> None:
        pass


def _run_live(clip, seconds_per_packet: float, max_lag_s: float | None):
    metrics = PipelineMetrics()
    source = PacedFileSource(clip, "cam")
    out: Channel = Channel("decoded", 1000)
    decoders: list[_SlowDecoder] = []

    def make(src):
        decoders.append(_SlowDecoder(src, seconds_per_packet))
        return decoders[-1]

    stage = DecodeStage(source, make, out, metrics, max_lag_s=max_lag_s)

    async def main():
        runner = asyncio.create_task(run_stage(stage))
        frames = await drain(out)
        await runner
        return frames

    try:
        frames = asyncio.run(main())
    finally:
        stage.close()
        source.close()
    return frames, metrics


@pytest.mark.slow
def test_a_stream_that_falls_behind_skips_to_the_next_key_frame_and_counts_it(gop_clip):
    # 50 ms per frame of a 30 fps camera: without catching up it ends 1.5 s behind
    frames, metrics = _run_live(gop_clip, 0.05, max_lag_s=0.15)
    skipped = metrics.outcomes["cam"]["dropped_stale"]
    assert skipped > 20
    assert metrics.received["cam"] == len(frames) + skipped == 90  # every frame counted once
    indices = [f.index for f in frames]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    resumed = [b for a, b in zip(indices, indices[1:], strict=False) if b - a > 1]
    assert resumed and all(i % 15 == 0 for i in resumed)  # a skip resumes at a key frame

    frames_behind, metrics_behind = _run_live(gop_clip, 0.05, max_lag_s=None)
    assert metrics_behind.outcomes["cam"]["dropped_stale"] == 0
    assert len(frames_behind) == 90  # nothing skipped: every frame, ever later
    # each frame is dated by the camera's clock, so the backlog shows: 90 frames at 50 ms
    # each take 4.5 s for 3 s of video, and the last came out at least 1.5 s after capture
    assert time.monotonic() - frames_behind[-1].captured_at > 1.4
    first, last = frames_behind[0], frames_behind[-1]
    assert last.captured_at - first.captured_at == pytest.approx(89 / 30, abs=0.05)


def test_the_arrival_clock_sees_a_backlog_and_forgives_a_slow_camera_clock():
    clock = ArrivalClock(drift=1e-3)
    for k in range(30):  # read as sent: 100 ms after capture, steady
        clock.observe(k / 30, 1000.0 + k / 30 + 0.1)
    assert clock.arrival(29 / 30) == pytest.approx(1000.0 + 29 / 30 + 0.1)
    for k in range(30, 60):  # the reader falls behind: each read 20 ms later than the last
        read_at = 1000.0 + k / 30 + 0.1 + 0.02 * (k - 29)
        clock.observe(k / 30, read_at)
    backlog = read_at - clock.arrival(59 / 30)
    assert backlog == pytest.approx(0.6, abs=0.01)  # 30 reads x 20 ms, minus 1 ms/s drift
    clock.reset()
    assert clock.arrival(1.0) is None


def test_a_camera_with_b_frames_at_a_low_rate_is_not_taken_for_one_behind(tmp_path):
    """5 fps with three B-frames: each B-frame arrives after the later picture it refers to,
    up to 600 ms after its own capture. Read per packet, that looked like a backlog and the
    stream skipped to the next key frame again and again (3 of every 5 frames lost); read
    from the newest picture reached, nothing is skipped."""
    path = tmp_path / "bframes.mp4"
    make_test_clip(path, frames=30, size=(320, 240))
    _reencode(path, 5, {"g": "5", "bf": "3", "preset": "veryfast"})
    with av.open(str(path)) as c:  # the clip does reorder: some packet's pts goes back
        pts = [p.pts for p in c.demux(video=0) if p.pts is not None]
    assert any(b < a for a, b in zip(pts, pts[1:], strict=False))
    decoded, metrics = _run_live(path, 0.0, max_lag_s=0.25)
    assert metrics.outcomes["cam"]["dropped_stale"] == 0
    assert len(decoded) == 30
