"""Issue 36: the counting bench's count with the truth's identities — each box given the id of
the object it overlaps most, counted by the same lines with no tracker."""

from __future__ import annotations

import json

import numpy as np

from app.bench.counting import analytics
from app.bench.true_ids import true_id_error, true_ids
from app.run.sources import stream_ids
from models.counting_data import FRAMES, TUNE_SEEDS, counting_scene, counts_path, write_truth
from models.counting_truth import object_boxes
from models.zoo import resolve_model


def test_each_box_takes_the_object_it_overlaps_most_and_each_object_one_box():
    objects = np.array([[0, 0, 10, 10], [20, 0, 30, 10]], np.float64)
    boxes = np.array([[1, 0, 11, 10],   # on object 7, IoU 0.82
                      [0, 0, 10, 9],    # on object 7 too, IoU 0.9: it takes it
                      [21, 0, 29, 10],  # on object 9
                      [40, 0, 50, 10],  # on nothing
                      [5, 0, 25, 10]], np.float32)  # across both, IoU under 0.3 with each
    assert true_ids(boxes, np.array([7, 9]), objects).tolist() == [-1, 7, 9, -1, -1]
    assert true_ids(boxes[:0], np.array([7, 9]), objects).tolist() == []
    assert true_ids(boxes, np.zeros(0, np.int64), objects[:0]).tolist() == [-1] * 5


def test_every_object_in_the_picture_has_a_box_around_its_outline_within_it():
    scene = counting_scene(TUNE_SEEDS[0])
    classed = {k for k, o in enumerate(scene.objects) if o.class_id >= 0}
    seen: set[int] = set()
    for index in range(FRAMES):
        ids, boxes = object_boxes(scene, index)
        assert set(ids.tolist()) <= classed and len(set(ids.tolist())) == len(ids)
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= scene.size[0]).all()
        assert (boxes[:, 3] <= scene.size[1]).all() and (boxes[:, 2:] > boxes[:, :2]).all()
        seen |= set(ids.tolist())
    assert seen == classed  # every object of the clip shows at some time


def test_the_whole_outlines_with_their_true_ids_count_what_the_truth_walks(tmp_path):
    """Boxes of every object's whole outline, hidden or not, one a frame: with their true
    ids the lines count within the truth's certain and possible crossings on the tuning
    part's first clip (the counter's band against the truth's margin may cost one)."""
    seed = TUNE_SEEDS[0]
    clip = tmp_path / f"count-{seed}.mp4"  # its truth alone: no picture is needed
    scene = counting_scene(seed)
    write_truth(clip, scene, seed, noisy=False)
    (sid,) = stream_ids([clip])
    with (tmp_path / "detections.jsonl").open("w") as lines:
        for index in range(FRAMES):
            ids, boxes = object_boxes(scene, index)
            detections = [{"box": box, "score": 1.0, "class_id": scene.objects[k].class_id}
                          for k, box in zip(ids.tolist(), boxes.tolist(), strict=True)]
            lines.write(json.dumps({"stream": sid, "frame": index, "pts": index / 30,
                                    "detections": detections}) + "\n")
    _, spec = resolve_model("models/zoo/shapes-yolo/model.onnx")
    truth = {sid: json.loads(counts_path(clip).read_text())}
    error = true_id_error(tmp_path, truth, analytics(1), spec)
    assert error["crossings"] >= 10 and error["errors"] <= 1, error
