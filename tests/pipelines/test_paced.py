import time

import pytest

from pipelines.decode.pyav import PyAVDecoder
from pipelines.sources.paced import PacedFileSource


def decode_all(source):
    decoder = PyAVDecoder(source.video, threads=1)
    seen = []
    for packet in source.packets():
        for picture in decoder.decode(packet):
            seen.append((time.monotonic(), picture.pts))
    return seen


def test_frames_arrive_no_earlier_than_their_capture_time(small_clip):
    with PacedFileSource(small_clip) as source:
        start = time.monotonic()
        seen = decode_all(source)
        assert len(seen) == 60
        for at, pts in seen:
            assert at >= source.arrival_time(pts) - 1e-3
        # 60 frames at 30 fps: about two seconds, not as fast as decoding allows
        assert time.monotonic() - start == pytest.approx(59 / 30, abs=0.5)
        assert source.frame_count is None and source.live


def test_looping_keeps_timestamps_running_until_the_duration(small_clip):
    with PacedFileSource(small_clip, duration_s=3.0, loop=True) as source:
        seen = decode_all(source)
    pts = [p for _, p in seen]
    assert 75 <= len(pts) <= 95  # about 3 s of a 30 fps clip that is 2 s long
    # every frame of each pass, none lost where one pass meets the next (the decoder's
    # reordering held the last two of each, which the next pass's key frame dropped)
    # (the duration may end between a P frame and the B frames before it: those are not read)
    frames = [round(p * 30) for p in pts]
    assert frames == sorted(set(frames)) and set(range(75)) <= set(frames)


def test_a_bad_duration_is_refused(small_clip):
    with pytest.raises(ValueError, match="duration"):
        PacedFileSource(small_clip, duration_s=0)
