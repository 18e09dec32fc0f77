"""Generated media: exact frame counts, truth that matches the clip, determinism by seed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from pipelines.synthetic.demo import make_demo_clip, plan_shots
from pipelines.synthetic.photos import NON_PERSON_PHOTOS, PERSON_PHOTOS, photo_has_person
from pipelines.synthetic.rectangles import make_test_clip
from pipelines.synthetic.truth import load_truth, truth_path


def decode_all(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


@pytest.mark.parametrize("codec", ["h264", "hevc", "mpeg4"])
@pytest.mark.parametrize("frames", [1, 17])
def test_test_clip_decodes_to_exactly_the_frames_asked(tmp_path: Path, codec: str,
                                                       frames: int) -> None:
    path = make_test_clip(tmp_path / f"{codec}.mp4", frames=frames, size=(160, 96), codec=codec)
    decoded = decode_all(path)
    assert len(decoded) == frames
    assert all(image.shape == (96, 160, 3) for image in decoded)


def test_a_clip_is_made_where_its_folder_does_not_exist_yet(tmp_path: Path) -> None:
    path = make_test_clip(tmp_path / "build" / "demo" / "clip.mp4", frames=3, size=(160, 96))
    assert len(decode_all(path)) == 3


def test_hevc_test_clips_have_no_reordered_frames(tmp_path: Path) -> None:
    # with B-frames x265 left a one-frame clip's decode timestamp unset now and then under
    # load, and the MP4 muxer refused the packet: each packet must decode where it shows
    path = make_test_clip(tmp_path / "hevc.mp4", frames=17, size=(160, 96), codec="hevc")
    with av.open(str(path)) as container:
        stamps = [(p.pts, p.dts) for p in container.demux(video=0) if p.size]
    assert len(stamps) == 17
    assert all(pts == dts for pts, dts in stamps)


def test_test_clip_rectangles_move(tmp_path: Path) -> None:
    decoded = decode_all(make_test_clip(tmp_path / "moving.mp4", frames=10))
    assert np.abs(decoded[0].astype(int) - decoded[-1].astype(int)).mean() > 1.0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"codec": "vp9"}, "codec must be one of"),
    ({"frames": 0}, "frames must be >= 1"),
    ({"size": (161, 96)}, "size must be even"),
])
def test_test_clip_rejects_bad_arguments(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_test_clip(tmp_path / "bad.mp4", **kwargs)


@pytest.mark.parametrize(("seconds", "kinds"), [(1.0, {True}), (4.0, {True, False})])
def test_demo_truth_matches_the_decoded_clip(tmp_path: Path, seconds: float,
                                             kinds: set[bool]) -> None:
    calls: list[tuple[int, int]] = []
    path = make_demo_clip(tmp_path / "demo.mp4", seconds=seconds, size=(320, 180),
                          progress=lambda done, total: calls.append((done, total)))
    truth = load_truth(path)
    decoded = decode_all(path)
    assert truth["frame_count"] == len(decoded) == round(seconds * 30) == len(calls)
    assert calls[-1] == (len(decoded), len(decoded))
    assert (truth["clip"], truth["width"], truth["height"]) == ("demo.mp4", 320, 180)
    assert decoded[0].shape == (180, 320, 3)
    assert {s["person"] for s in truth["segments"]} == kinds
    for segment in truth["segments"]:
        labels = truth["person"][segment["first_frame"]:segment["last_frame"] + 1]
        assert set(labels) == {photo_has_person(segment["photo"])} == {segment["person"]}


def test_demo_is_deterministic_by_seed(tmp_path: Path) -> None:
    truths = []
    for name, seed in [("a", 3), ("b", 3), ("c", 4)]:
        (tmp_path / name).mkdir()
        path = make_demo_clip(tmp_path / name / "demo.mp4", seconds=6, size=(64, 36), seed=seed)
        truths.append(json.loads(truth_path(path).read_text()))
    assert truths[0] == truths[1]
    assert truths[0]["segments"] != truths[2]["segments"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_plan_alternates_and_shows_every_photo_twice(seed: int) -> None:
    shots = plan_shots(600, 30, seed)
    assert [s.person for s in shots] == [i % 2 == 0 for i in range(len(shots))]
    assert [s.first_frame for s in shots[1:]] == [s.last_frame + 1 for s in shots[:-1]]
    assert (shots[0].first_frame, shots[-1].last_frame) == (0, 599)
    appearances = Counter(s.photo for s in shots)
    assert set(appearances) == set(PERSON_PHOTOS + NON_PERSON_PHOTOS)
    assert min(appearances.values()) >= 2
    for photo in appearances:
        moves = [(s.zoom, s.offset_from) for s in shots if s.photo == photo]
        assert len(set(moves)) == len(moves), f"{photo} repeats a camera move"
        zooming_in = {zoom[1] > zoom[0] for zoom, _ in moves}
        assert zooming_in == {True, False}, f"{photo} always zooms the same way"


def test_load_truth_rejects_labels_that_do_not_fit_the_frames(tmp_path: Path) -> None:
    path = make_demo_clip(tmp_path / "demo.mp4", seconds=1, size=(64, 36))
    truth = json.loads(truth_path(path).read_text())
    truth["person"] = truth["person"][:-1]
    truth_path(path).write_text(json.dumps(truth))
    with pytest.raises(ValueError, match="one label per frame"):
        load_truth(truth_path(path))
