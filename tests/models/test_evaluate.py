"""COCO mAP on crafted predictions: perfect, shifted, empty, wrong class, ignored regions."""

from __future__ import annotations

import numpy as np
import pytest

from models.evaluate import FrameTruth, mean_average_precision

CLASSES = ("disc", "box")
TRUTH = [FrameTruth(np.array([[10, 10, 50, 50, 0], [60, 20, 100, 80, 1]], np.float32)),
         FrameTruth(np.array([[5, 5, 35, 45, 1]], np.float32))]


def perfect() -> list[np.ndarray]:
    return [np.column_stack([t.boxes[:, :4], np.full(len(t.boxes), 0.9), t.boxes[:, 4]])
            for t in TRUTH]


def shifted(dx: float) -> list[np.ndarray]:
    out = []
    for rows in perfect():
        rows = rows.copy()
        rows[:, [0, 2]] += dx
        out.append(rows)
    return out


def test_perfect_predictions_score_one() -> None:
    accuracy = mean_average_precision(TRUTH, perfect(), CLASSES)
    assert accuracy.map50 == pytest.approx(1.0)
    assert accuracy.map50_95 == pytest.approx(1.0)
    assert accuracy.objects == 3 and accuracy.detections == 3 and accuracy.frames == 2


def test_shifted_boxes_score_lower_the_further_they_are_off() -> None:
    slight = mean_average_precision(TRUTH, shifted(4.0), CLASSES)
    far = mean_average_precision(TRUTH, shifted(12.0), CLASSES)
    assert slight.map50 == pytest.approx(1.0)  # IoU still above 0.5
    assert far.map50_95 < slight.map50_95 < 1.0
    assert far.map50 < 1.0  # the 30 px wide box falls under IoU 0.5


def test_no_predictions_score_zero() -> None:
    empty = [np.zeros((0, 6), np.float32) for _ in TRUTH]
    accuracy = mean_average_precision(TRUTH, empty, CLASSES)
    assert (accuracy.map50, accuracy.map50_95, accuracy.detections) == (0.0, 0.0, 0)


def test_right_box_wrong_class_scores_zero() -> None:
    swapped = [rows.copy() for rows in perfect()]
    for rows in swapped:
        rows[:, 5] = 1 - rows[:, 5]
    assert mean_average_precision(TRUTH, swapped, CLASSES).map50 == 0.0


def test_a_false_alarm_scoring_above_the_hits_lowers_precision() -> None:
    alarm = np.array([[200, 200, 240, 240, 0.99, 0]], np.float32)
    predictions = [np.concatenate([alarm, perfect()[0]]), perfect()[1]]
    assert mean_average_precision(TRUTH, predictions, CLASSES).map50 < 1.0


def test_detections_of_ignored_objects_are_neither_hits_nor_false_alarms() -> None:
    hidden = np.array([[200, 200, 240, 240, 0]], np.float32)
    truth = [FrameTruth(TRUTH[0].boxes, hidden), TRUTH[1]]
    on_hidden = np.array([[200, 200, 240, 240, 0.99, 0]], np.float32)
    predictions = [np.concatenate([on_hidden, perfect()[0]]), perfect()[1]]
    accuracy = mean_average_precision(truth, predictions, CLASSES)
    assert accuracy.map50 == pytest.approx(1.0) and accuracy.objects == 3


def test_per_class_ap_names_each_class() -> None:
    only_discs = [rows[rows[:, 5] == 0] for rows in perfect()]
    per_class = mean_average_precision(TRUTH, only_discs, CLASSES).ap50_per_class
    assert per_class["disc"] == pytest.approx(1.0) and per_class["box"] == 0.0


def test_frames_and_predictions_must_pair_up() -> None:
    with pytest.raises(ValueError, match="one prediction array per frame"):
        mean_average_precision(TRUTH, perfect()[:1], CLASSES)


def test_truth_with_an_unknown_class_is_refused() -> None:
    bad = [FrameTruth(np.array([[0, 0, 10, 10, 5]], np.float32))]
    with pytest.raises(ValueError, match="class_id 5"):
        mean_average_precision(bad, [np.zeros((0, 6))], CLASSES)
