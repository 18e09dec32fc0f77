"""Tracking scored (issue 18): tracking clips with identities, MOT truth, HOTA/MOTA/IDF1
through `vidpipe model evaluate --track`, line counts against the true objects."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.recipes.track_eval import truth_crossings
from models.tracking_data import make_tracking_clip, mot_truth_path, tracking_frames
from pipelines.analytics.config import LineConfig
from tests.support.cli import vidpipe_model

MIDDLE = LineConfig(name="middle", points=(160, 0, 160, 192))



@pytest.fixture(scope="module")
def lanes(tmp_path_factory) -> Path:
    return make_tracking_clip(tmp_path_factory.mktemp("lanes") / "lanes.mp4", clip=5,
                              frames=60, size=(320, 192))


def test_a_clear_tracking_clip_shows_every_object_in_every_frame_with_its_identity():
    truths = [t for _, t in tracking_frames(2000, 1, 40, (320, 192), occluded=False)]
    objects = {len(t.ids) for t in truths}
    assert len(objects) == 1 and objects.pop() >= 3  # one per lane, none ever hidden
    assert all(len(t.ignore) == 0 for t in truths)
    assert all(sorted(t.ids.tolist()) == sorted(truths[0].ids.tolist()) for t in truths)
    hidden = [t for _, t in tracking_frames(2000, 1, 40, (320, 192), occluded=True)]
    assert any(len(t.ignore) for t in hidden) or len({len(t.ids) for t in hidden}) > 1


def test_mot_truth_rows_follow_the_mot_challenge_columns(lanes: Path):
    rows = [r.split(",") for r in mot_truth_path(lanes).read_text().splitlines()]
    assert {len(r) for r in rows} == {9}
    assert {int(r[0]) for r in rows} == set(range(1, 61))  # 1-based frames, all 60
    assert {int(r[7]) for r in rows} <= {1, 8}  # scored, or hidden (a distractor)
    assert min(int(r[1]) for r in rows) >= 1


def test_the_true_line_count_is_every_crossing_of_a_true_object(tmp_path: Path):
    truth = tmp_path / "t.mot.txt"
    xs = [*range(100, 221, 20), *range(220, 99, -20)]  # right across x=160, and back
    truth.write_text("".join(f"{f},1,{x - 10},50,20,20,1,1,1\n" for f, x in enumerate(xs, 1)))
    assert truth_crossings(truth, MIDDLE) == {"in": 1, "out": 1}


def test_evaluate_with_a_tracker_prints_and_writes_hota_mota_idf1(lanes: Path, tmp_path: Path):
    out = tmp_path / "run"
    for folder in ("gt", "tracks"):  # an earlier run's clip in the same folder: not scored
        (out / "mot" / folder).mkdir(parents=True)
        (out / "mot" / folder / "earlier.txt").write_text(
            mot_truth_path(lanes).read_text() if folder == "gt" else "")
    code, output = vidpipe_model("evaluate", "shapes-yolo", "--video", lanes, "--track",
                                 "bytetrack", "--line", "middle=160,0,160,192", "--out", out)
    assert code == 0, output
    assert set(json.loads((out / "tracking.json").read_text())["per_clip"]) == {"lanes"}
    assert "HOTA" in output and "IDF1" in output and "line middle on lanes" in output
    record = json.loads((out / "tracking.json").read_text())
    overall = record["overall"]
    # the shapes detector on clear lanes: objects found and followed (figures in BENCHMARKS)
    assert overall["HOTA"] > 30 and overall["IDF1"] > 30, overall
    counts = record["lines"]["middle"]["lanes"]
    assert set(counts) == {"found", "truth"}
    tracks = (out / "mot" / "tracks" / "lanes.txt").read_text().splitlines()
    assert tracks and all(int(r.split(",")[1]) >= 1 for r in tracks)


def test_the_truth_scored_as_tracks_is_perfect_and_swapped_ids_are_not(lanes: Path,
                                                                       tmp_path: Path):
    from trackers.eval import evaluate_mot_sequences

    gt, found = tmp_path / "gt", tmp_path / "found"
    gt.mkdir()
    found.mkdir()
    rows = mot_truth_path(lanes).read_text().splitlines()
    (gt / "s.txt").write_text("\n".join(rows) + "\n")
    scored = [r.split(",") for r in rows if r.split(",")[7] == "1"]
    (found / "s.txt").write_text("".join(",".join(r[:6] + ["1", "-1", "-1", "-1"]) + "\n"
                                         for r in scored))
    perfect = evaluate_mot_sequences(gt, found, metrics=["HOTA", "Identity"]).aggregate
    assert perfect.HOTA.HOTA == pytest.approx(1.0) and perfect.Identity.IDF1 == pytest.approx(1)
    rng = np.random.default_rng(0)
    swapped = [r[:1] + [str(int(r[1]) + 100 * int(rng.integers(0, 3)))] + r[2:6]
               for r in scored]
    (found / "s.txt").write_text("".join(",".join(r + ["1", "-1", "-1", "-1"]) + "\n"
                                         for r in swapped))
    worse = evaluate_mot_sequences(gt, found, metrics=["HOTA", "Identity"]).aggregate
    assert worse.Identity.IDF1 < 0.6 and worse.HOTA.HOTA < perfect.HOTA.HOTA


def test_evaluate_with_a_tracker_needs_mot_truth(tmp_path: Path):
    from models.data import make_clip

    clip = make_clip(tmp_path / "plain.mp4", seed=1, frames=4, size=(320, 192))
    code, output = vidpipe_model("evaluate", "shapes-yolo", "--video", clip, "--track",
                                 "bytetrack", "--out", tmp_path / "run")
    assert code == 2 and "no MOT truth beside the clip" in output


def test_clips_with_tracking_writes_mot_truth_beside_each_clip(tmp_path: Path):
    code, output = vidpipe_model("clips", "--out", tmp_path, "--count", 2, "--frames", 3,
                                 "--size", "320x192", "--tracking", "--occluded")
    assert code == 0, output
    for k in range(2):
        assert mot_truth_path(tmp_path / f"clip-{k}.mp4").read_text().startswith("1,")
