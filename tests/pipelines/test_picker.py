"""Which frames the model sees (pipelines/decode/picker.py): one in N, or about F a second by
the stream's own clock."""

import numpy as np
import pytest

from pipelines.decode.picker import DetectionPicker


def taken(picker: DetectionPicker, pts: list[float], fps: float) -> list[int]:
    return [i for i, t in enumerate(pts) if picker.take(t, 1.0 / fps)]


@pytest.mark.parametrize("fps, rate, stride", [(30, 5, 6), (25, 5, 5), (30, 10, 3), (30, 30, 1),
                                               (15, 5, 3)])
def test_a_steady_camera_gets_the_rate_asked_for(fps, rate, stride):
    pts = [i / fps for i in range(300)]
    assert taken(DetectionPicker(fps=rate), pts, fps) == list(range(0, 300, stride))


def test_a_rate_above_the_cameras_takes_every_frame():
    pts = [i / 10 for i in range(50)]
    assert taken(DetectionPicker(fps=25), pts, 10) == list(range(50))


def test_a_camera_whose_rate_wanders_still_gets_about_the_rate_asked_for():
    """A camera declaring 30 fps that delivers 20 to 30, with jitter: by frame count (one in
    six) it would get 3.3 to 5 a second; by its clock it gets 5."""
    rng = np.random.default_rng(7)
    intervals = rng.uniform(1 / 30, 1 / 20, size=1200) + rng.normal(0, 0.002, size=1200)
    pts = list(np.cumsum(np.clip(intervals, 0.01, None)))
    seconds = pts[-1] - pts[0]
    picks = taken(DetectionPicker(fps=5), pts, 30)
    assert len(picks) / seconds == pytest.approx(5, rel=0.12)
    gaps = np.diff([pts[i] for i in picks])
    assert gaps.min() >= 0.2 - 0.5 / 30


def test_one_in_n_counts_frames():
    assert taken(DetectionPicker(every=4), [i / 30 for i in range(12)], 30) == [0, 4, 8]


@pytest.mark.parametrize("every, fps, words", [(0, None, ">= 1"), (1, 0.0, "> 0"),
                                               (2, 5.0, "not both")])
def test_a_picker_refuses_what_makes_no_sense(every, fps, words):
    with pytest.raises(ValueError, match=words):
        DetectionPicker(every=every, fps=fps)
