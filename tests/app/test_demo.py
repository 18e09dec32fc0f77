"""Acceptance on the demo clip: the shipped person detector against the clip's ground truth."""

import json

import pytest

from app.run.demo import PersonScore, score_person_frames
from pipelines.synthetic.demo import make_demo_clip
from pipelines.synthetic.truth import load_truth
from tests.support.cli import vidpipe


def test_score_person_frames_counts_hits_misses_and_missing_lines():
    truth = {"person": [True, True, False, False, True]}
    lines = [
        {"frame": 0, "detections": [{"label": "person", "score": 0.9}]},
        {"frame": 1, "detections": [{"label": "person", "score": 0.4}]},  # below threshold
        {"frame": 2, "detections": [{"label": "person", "score": 0.7}]},  # false hit
        {"frame": 3, "detections": [{"label": "dog", "score": 0.99}]},    # not a person
    ]  # frame 4 has no line
    score = score_person_frames(lines, truth)
    assert score == PersonScore(person_frames=3, person_hits=1, empty_frames=2, false_hits=1,
                                missing_lines=1)


@pytest.mark.slow
def test_demo_clip_people_are_found_and_empty_frames_stay_empty(tmp_path):
    clip = make_demo_clip(tmp_path / "demo.mp4")
    code, output = vidpipe("run", clip, "--out", tmp_path / "out")
    assert code == 0, output
    jsonl = tmp_path / "out" / "detections.jsonl"
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    truth = load_truth(clip)
    assert [x["frame"] for x in lines] == list(range(truth["frame_count"]))
    score = score_person_frames(lines, truth)
    assert score.missing_lines == 0
    assert score.hit_rate >= 0.95, score
    assert score.false_rate <= 0.05, score
