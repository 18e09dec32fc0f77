"""Synthetic scenes: determinism by seed, boxes that fit what was drawn, clips that decode."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from models.data import (
    BOXES_FORMAT,
    boxes_path,
    clip_frames,
    load_boxes,
    make_clip,
    training_batch,
)
from models.scene import CLASSES, VISIBLE_MIN, Lighting, Scene, SceneObject, render

FLAT = Lighting(gain=1.0, swing=0.0, period=100.0, gradient=(0.0, 0.0), cast=(1.0, 1.0, 1.0),
                noise=0.0)


def shape(class_id: int, centre: tuple[float, float], radius: float = 12.0,
          velocity: tuple[float, float] = (0.0, 0.0), colour=(250, 20, 20)) -> SceneObject:
    return SceneObject(class_id=class_id, centre=centre, velocity=velocity, radius=radius,
                       aspect=1.4, angle=0.3, spin=0.0, form=0.5, colour=colour,
                       second=(0, 0, 0), pattern=0, exposure=0.0)


def flat_scene(*objects: SceneObject, size=(96, 64)) -> Scene:
    background = np.full((size[1], size[0], 3), 40, dtype=np.uint8)
    return Scene(size, background, (0.0, 0.0), objects, FLAT)


def test_training_batches_are_the_same_for_the_same_seed_and_index() -> None:
    a, b = training_batch(7, 3, 4, (96, 64)), training_batch(7, 3, 4, (96, 64))
    assert np.array_equal(a.images, b.images)
    for x, y in zip(a.boxes + a.ignore, b.boxes + b.ignore, strict=True):
        assert np.array_equal(x, y)
    other = training_batch(8, 3, 4, (96, 64))
    assert not np.array_equal(a.images, other.images)
    assert a.images.shape == (4, 64, 96, 3) and a.images.dtype == np.uint8


@pytest.mark.parametrize("class_id", range(len(CLASSES)))
def test_box_is_the_extent_of_the_drawn_shape(class_id: int) -> None:
    image, truth = render(flat_scene(shape(class_id, (48.0, 30.0))))
    drawn = np.argwhere(np.abs(image[..., 0].astype(int) - 40) >= 105)  # >= half covered
    (y1, x1), (y2, x2) = drawn.min(0), drawn.max(0) + 1
    assert truth.boxes.shape == (1, 5) and truth.boxes[0, 4] == class_id
    np.testing.assert_allclose(truth.boxes[0, :4], [x1, y1, x2, y2], atol=1.0)
    assert len(truth.ignore) == 0


@pytest.mark.parametrize("offset, ignored", [(0.0, []), (14.0, [0]), (24.0, None)])
def test_hidden_objects_are_ignored_and_wholly_hidden_ones_vanish(offset: float,
                                                                  ignored: list | None) -> None:
    behind = shape(0, (48.0, 30.0 + offset), radius=8.0)
    cover = shape(1, (48.0, 30.0), radius=20.0, colour=(20, 250, 20))
    _, truth = render(flat_scene(behind, cover))
    if ignored is None:  # mostly in view: scored like any other object
        assert sorted(truth.boxes[:, 4].tolist()) == [0, 1] and len(truth.ignore) == 0
    else:
        assert truth.boxes[:, 4].tolist() == [1]
        assert truth.ignore[:, 4].tolist() == ignored


def test_a_partly_hidden_object_has_the_box_of_its_visible_part() -> None:
    behind = replace(shape(1, (40.0, 30.0), radius=14.0), aspect=1.0, angle=0.0)  # 26..54
    cover = replace(shape(1, (64.0, 30.0), radius=14.0, colour=(20, 250, 20)), aspect=1.0,
                    angle=0.0)  # x from 50: hides 54 - 50 = 4 of 28 columns
    _, truth = render(flat_scene(behind, cover))
    assert len(truth.boxes) == 2 and not len(truth.ignore)
    hidden = truth.boxes[0] if truth.boxes[0, 0] < truth.boxes[1, 0] else truth.boxes[1]
    np.testing.assert_allclose(hidden[:4], [26, 16, 50, 44], atol=1.0)


def test_an_object_cut_by_the_frame_edge_has_its_box_clipped_to_the_frame() -> None:
    image, truth = render(flat_scene(shape(1, (2.4, 30.0), radius=12.0)))
    rows = np.concatenate([truth.boxes, truth.ignore])
    assert len(rows) == 1 and rows[0, 0] == 0.0
    assert (image[:, 0] != 40).any()  # drawn up to the edge


def test_distractors_are_drawn_but_never_labelled() -> None:
    image, truth = render(flat_scene(shape(-1, (30.0, 30.0)), shape(-2, (60.0, 30.0))))
    assert (image != 40).any()
    assert len(truth.boxes) == 0 and len(truth.ignore) == 0


def test_moving_objects_are_smeared_along_their_motion() -> None:
    still, _ = render(flat_scene(shape(1, (48.0, 30.0))))
    fast = shape(1, (48.0, 30.0), velocity=(8.0, 0.0))
    moving, _ = render(flat_scene(replace(fast, exposure=1.0)))
    assert (moving != 40).any(axis=2).sum() > (still != 40).any(axis=2).sum()
    # a smear blends the edge: more partially covered pixels
    assert len(np.unique(moving[..., 0])) > len(np.unique(still[..., 0]))


def test_visible_objects_pass_the_visibility_bar() -> None:
    assert 0.0 < VISIBLE_MIN < 1.0
    _, truth = render(flat_scene(shape(2, (30.0, 30.0)), shape(3, (70.0, 30.0))))
    assert sorted(truth.boxes[:, 4].tolist()) == [2, 3]


def test_clip_decodes_to_its_frames_and_its_boxes_file_matches(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", seed=5, frames=6, size=(160, 96))
    with av.open(str(clip)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    record = load_boxes(boxes_path(clip))
    assert record["format"] == BOXES_FORMAT and record["classes"] == list(CLASSES)
    assert len(frames) == len(record["frames"]) == len(record["ignore"]) == 6
    assert (record["width"], record["height"]) == (160, 96)
    rendered = [image for image, _ in clip_frames(5, 0, 6, (160, 96))]
    other = next(clip_frames(6, 0, 1, (160, 96)))[0]

    def gap(a: np.ndarray, b: np.ndarray) -> float:  # blurred: sensor noise averages out
        return float(np.abs(cv2.blur(a, (5, 5)).astype(int) - cv2.blur(b, (5, 5))).mean())

    assert gap(frames[3], rendered[3]) < 6 < gap(frames[3], other)
    assert record["frames"][0] != record["frames"][-1]  # objects move


def test_clips_of_another_seed_differ(tmp_path: Path) -> None:
    a = [image for image, _ in clip_frames(1, 0, 1, (96, 64))]
    b = [image for image, _ in clip_frames(2, 0, 1, (96, 64))]
    again = [image for image, _ in clip_frames(1, 0, 1, (96, 64))]
    assert np.array_equal(a[0], again[0]) and not np.array_equal(a[0], b[0])


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read"),
    (json.dumps({"frames": "x"}), "'frames' list"),
    (json.dumps({"frames": [[[1, 2, 3]]]}), "frame 0"),
    (json.dumps({"frames": [[]], "ignore": []}), "'ignore' has 0 frames"),
])
def test_bad_boxes_files_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.boxes.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_boxes(path)
