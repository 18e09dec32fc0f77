"""Issue 36: the counting bench's perfect detector — a clip's truth boxes written as a run, at
every frame or one in N, then tracked and scored by the same replay as the rules."""

from __future__ import annotations

import json

import pytest

from app.bench.perfect import replayed_run, write_truth_run
from app.bench.tracking import MIDDLE
from app.recipes.track_eval import truth_crossings
from models.data import boxes_path
from models.tracking_data import make_tracking_clip, mot_truth_path
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, TrackerSettings


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    folder = tmp_path_factory.mktemp("perfect")
    return make_tracking_clip(folder / "lanes.mp4", clip=3, frames=90, size=(640, 384))


@pytest.mark.parametrize("every", [1, 3])
def test_the_truth_run_has_every_frame_and_the_truth_boxes_on_the_models_frames(clip,
                                                                               tmp_path,
                                                                               every):
    truth = json.loads(boxes_path(clip).read_text())["frames"]
    lines = write_truth_run([clip], every, tmp_path).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["frame"] for r in records] == list(range(len(truth)))
    for record, boxes in zip(records, truth, strict=True):
        seen = record["frame"] % every == 0
        assert record.get("predicted", False) is not seen
        given = [d["box"] + [d["class_id"]] for d in record["detections"]]
        assert given == ([box[:4] + [box[4]] for box in boxes] if seen else [])


def test_tracking_the_truth_boxes_scores_near_perfect(clip, tmp_path):
    """Lanes of shapes in the clear: a tracker fed the truth's boxes follows every object
    (the clip's score is the tracker's alone) and counts what the true objects cross."""
    _, spec = resolve_model("models/zoo/shapes-yolo/model.onnx")
    config = AnalyticsConfig(track=TrackerSettings(), lines=[MIDDLE])
    counts, scores = replayed_run(write_truth_run([clip], 1, tmp_path), [clip], config, spec)
    assert scores["HOTA"] > 85 and scores["IDSW"] <= 2, scores
    assert counts["lanes"]["lines"]["middle"] == truth_crossings(mot_truth_path(clip), MIDDLE)
