"""Which frames keep their picture past the model (pipelines/sinks/pictures.py): what a
stream's sinks draw on, a snapshot's cadence, and the frames held for a slow detection rate
holding metadata, not pictures."""

from __future__ import annotations

import numpy as np
import pytest

from models.spec import ModelSpec
from pipelines.decode.picker import DetectionPicker
from pipelines.decode.selection import FrameSelection
from pipelines.frame import Frame
from pipelines.sinks.jsonl import JsonlSink
from pipelines.sinks.pictures import Cadence, PictureKeeper, picture_interval, release
from pipelines.sinks.snapshot import LatestFrameSink

SPEC = ModelSpec.model_validate({"name": "t", "input": {"width": 64, "height": 64},
                                 "output": {"format": "yolov8"}, "classes": ["person"]})


class EventSnapshots:  # what the event sink says of itself when it keeps snapshots
    wants_images = True
    pictures_of_unseen = False


class Annotated:  # a sink that draws on every frame (annotated video)
    wants_images = True


def frame(index: int, fps: float = 30.0) -> Frame:
    return Frame("cam", index, index / fps, 100.0 + index / fps,
                 np.zeros((72, 128, 3), np.uint8))


def test_what_sinks_draw_on_sets_the_interval(tmp_path):
    snapshot = LatestFrameSink(SPEC, interval_s=0.5)
    with JsonlSink(tmp_path / "d.jsonl", SPEC) as lines:
        assert picture_interval([lines], unseen=False) is None
        assert picture_interval([lines, snapshot], unseen=True) == 0.5
        assert picture_interval([snapshot, EventSnapshots()], unseen=False) == 0.0
        assert picture_interval([snapshot, EventSnapshots()], unseen=True) == 0.5
        assert picture_interval([snapshot, Annotated()], unseen=True) == 0.0


def test_a_cadence_keeps_a_picture_each_half_interval():
    kept = [f.index for f in map(frame, range(90)) if Cadence(None)(f)]
    assert kept == []
    cadence = Cadence(0.5)
    kept = [f.index for f in map(frame, range(90)) if cadence(f)]
    assert kept == list(range(0, 90, 8))  # 0.25 s at 30 fps: the first frame 8 later
    assert all(Cadence(0.0)(f) for f in map(frame, range(3)))
    with pytest.raises(ValueError, match=">= 0 s"):
        Cadence(-1.0)


def test_a_slow_detection_rate_holds_metadata_not_pictures():
    keeper = PictureKeeper([LatestFrameSink(SPEC, interval_s=0.5), EventSnapshots()])
    selection = FrameSelection(DetectionPicker(fps=0.2), None, keeper.unseen)
    out = [x for i in range(151) for x in selection.select(frame(i), None, 1 / 30)]
    carrier = out[-1]  # frame 150, 5 s after the first one taken
    assert carrier.index == 150 and len(carrier.riders) == 149
    pictured = [r.index for r in carrier.riders if r.image is not None]
    assert pictured == list(range(1, 150, 15))  # one each 0.5 s: no more than a snapshot
    assert carrier.image is not None  # the model's frame keeps its own till prepared
    assert keeper.seen(carrier)  # the event sink's snapshots are of the frames it saw


def test_a_released_frame_keeps_its_size():
    f = frame(0)
    release(f)
    assert f.image is None and f.size == (128, 72)
