"""A quiet stretch of skipped frames written as one line (pipelines/sinks/quiet.py): which
results fold, what the line says, and the lines given back one per frame."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.spec import ModelSpec
from pipelines.analytics.replay import recorded_frames
from pipelines.errors import ConfigError
from pipelines.frame import Detections, Frame, Result
from pipelines.sinks.jsonl import detection_line
from pipelines.sinks.quiet import fold, frame_records, unfold

SPEC = ModelSpec.model_validate({"name": "t", "input": {"width": 64, "height": 64},
                                 "output": {"format": "yolov8"}, "classes": ["person"]})


def result(index: int, skipped: str | None = "idle", **extra) -> Result:
    frame = Frame("cam", index, index / 15, 0.0, None, skipped=skipped,
                  gap_s=extra.pop("gap_s", None))
    return Result(frame, extra.pop("detections", Detections.empty()), **extra)


def lines(results: list[Result], every_line: bool = False) -> list[str]:
    return [x for r in results if (x := detection_line(r, SPEC, every_line)) is not None]


def test_a_stretch_of_skipped_frames_is_one_line_its_last():
    written = lines(fold([result(i) for i in range(5, 12)]))
    assert len(written) == 1
    line = json.loads(written[0])
    assert line["frame"] == 11 and line["skipped"] == "idle"
    assert line["skipped_run"] == {"frame": 5, "pts": round(5 / 15, 6), "frames": 7}


def test_every_line_writes_each_frame_and_no_run():
    written = lines(fold([result(i) for i in range(5, 12)]), every_line=True)
    assert [json.loads(x)["frame"] for x in written] == list(range(5, 12))
    assert not any("skipped_run" in x for x in written)


def test_what_happened_on_a_frame_keeps_its_line():
    box = Detections(np.array([[0, 0, 4, 4]], np.float32), np.array([0.9], np.float32),
                     np.array([0], np.int32))
    results = [result(0), result(1), result(2, events=[{"type": "zone_exit"}]), result(3),
               result(4, skipped=None, detections=box), result(5), result(6, gap_s=30.0),
               result(7), result(8, predicted=True), result(9), result(11), result(12)]
    written = [json.loads(x) for x in lines(fold(results))]
    # 0-1 fold into 1; the event, the box, the gap and the prediction keep theirs; 10 is
    # missing, so 9 stands alone and 11-12 fold
    assert [x["frame"] for x in written] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 12]
    assert [x["skipped_run"]["frames"] for x in written if "skipped_run" in x] == [2, 2]


def test_unfold_gives_each_frame_its_line_with_pts_spread_evenly():
    folded = [json.loads(x) for x in lines(fold([result(i) for i in range(3, 9)]))]
    frames = [r for x in folded for r in unfold(x)]
    assert [x["frame"] for x in frames] == list(range(3, 9))
    assert np.allclose([x["pts"] for x in frames], [i / 15 for i in range(3, 9)], atol=2e-6)
    assert all(x["skipped"] == "idle" and x["detections"] == [] for x in frames)
    assert "skipped_run" not in frames[-1] and "time" in frames[-1]
    assert frame_records(lines(fold([result(i) for i in range(3, 9)]))) == frames


def test_a_run_that_does_not_add_up_is_not_a_detection_line():
    written = lines(fold([result(i) for i in range(3, 9)]))
    replayed = recorded_frames(written, "x.jsonl")["cam"]
    assert [f.index for f in replayed] == list(range(3, 9))
    assert all(f.skipped == "idle" and not len(f.detections) for f in replayed)
    line = json.loads(written[0])
    line["skipped_run"]["frames"] = 9  # frames 0-8, but it begins at 3
    with pytest.raises(ValueError, match="does not end at frame 8"):
        unfold(line)
    with pytest.raises(ConfigError, match="line 1: not a detection line"):
        recorded_frames([json.dumps(line)], "x.jsonl")
