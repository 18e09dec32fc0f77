"""``vidpipe model check`` and the harder demo clip: the pipeline against the reference path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.recipes.check import reference_detections
from app.run.demo import score_person_frames
from models.data import make_clip
from models.zoo import resolve_model
from pipelines.frame import Detections
from pipelines.postprocess.agreement import Agreement, pair_boxes
from pipelines.preprocess.reference import MAX_DIFF_TOLERANCE, MEAN_DIFF_TOLERANCE
from pipelines.synthetic.hard import make_hard_clip
from pipelines.synthetic.truth import load_truth
from tests.support.cli import vidpipe


def boxes(*rows: tuple[float, float, float, float, float, int]) -> Detections:
    array = np.asarray(rows, dtype=np.float32).reshape(-1, 6)
    return Detections(array[:, :4], array[:, 4], array[:, 5].astype(np.int32))


BOX = (10.0, 10.0, 110.0, 210.0, 0.9, 0)


def test_frames_agree_only_with_the_same_boxes_scores_and_count():
    agreement = Agreement()
    assert agreement.add(boxes(BOX), boxes(BOX))
    assert agreement.add(boxes(), boxes())
    assert not agreement.add(boxes(BOX), boxes(BOX, (300, 300, 350, 380, 0.5, 0)))  # count
    assert not agreement.add(boxes(BOX), boxes((10, 10, 110, 240, 0.9, 0)))  # IoU 0.87
    assert not agreement.add(boxes(BOX), boxes((10, 10, 110, 210, 0.87, 0)))  # score 0.03
    assert not agreement.add(boxes(BOX), boxes((10, 10, 110, 210, 0.9, 1)))  # class
    assert not agreement.add(boxes(BOX), None)  # the pipeline gave no result for it
    figures = agreement.as_dict()
    assert figures["frames"] == 7 and figures["frames_agreeing"] == 2
    assert figures["frames_missing"] == 1
    assert figures["frame_agreement"] == pytest.approx(2 / 7, abs=1e-4)


def test_boxes_pair_by_class_and_overlap_highest_score_first():
    reference = boxes((0, 0, 10, 10, 0.9, 0), (100, 100, 120, 120, 0.8, 0))
    other = boxes((101, 101, 121, 121, 0.79, 0), (0, 0, 10, 10, 0.9, 0))
    ious, diffs, paired = pair_boxes(reference, other)
    assert paired and ious[0] == pytest.approx(1.0) and 0.8 < ious[1] < 0.95
    assert diffs == pytest.approx([0.0, 0.01], abs=1e-6)


@pytest.fixture(scope="module")
def hard_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hard_clip(tmp_path_factory.mktemp("hard") / "hard.mp4", seconds=4.0,
                          size=(960, 540))


def check(*args: object) -> tuple[int, dict, str]:
    code, output = vidpipe("model", "check", *args, "--json")
    return code, json.loads(output.strip().splitlines()[-1]), output


def test_the_pipeline_feeds_the_person_model_its_reference_input(hard_clip: Path):
    code, report, output = check("ssdlite-person", "--video", hard_clip, "--frames", 60)
    assert code == 0, output
    assert report["frames"] == 60 and report["frame_agreement"] >= 0.99
    assert report["max_input_diff"] <= MAX_DIFF_TOLERANCE
    assert report["mean_input_diff"] <= MEAN_DIFF_TOLERANCE
    assert report["boxes_reference"] > 0  # people were found: the agreement is about boxes


def test_ffmpegs_resize_is_measured_off_the_reference(hard_clip: Path):
    code, report, output = check("ssdlite-person", "--video", hard_clip, "--frames", 30,
                                 "--ffmpeg-resize", "--min-agreement", "0")
    assert code == 0, output
    assert report["options"]["ffmpeg_resize"] is True
    assert report["max_input_diff"] > 10  # FFmpeg's filters: another picture


def test_a_variant_is_held_to_its_reference_and_to_fp32(tmp_path: Path):
    clip = make_clip(tmp_path / "shapes.mp4", seed=99, frames=12)
    path, _ = resolve_model("shapes-yolo")
    code, report, output = check(path.parent / "model.int8.onnx", "--video", clip)
    assert code == 0, output
    assert report["frames"] == 12 and report["frame_agreement"] >= 0.99
    assert report["fp32"]["file"] == "model.onnx" and report["fp32"]["frames"] == 12
    assert 0.0 <= report["fp32"]["frame_agreement"] <= 1.0


def test_a_check_below_the_agreement_asked_for_exits_1(hard_clip: Path):
    code, report, output = check("ssdlite-person", "--video", hard_clip, "--frames", 8,
                                 "--ffmpeg-resize", "--min-agreement", "1.0")
    assert (code == 1) == (report["frame_agreement"] < 1.0), output


def test_a_missing_clip_is_one_line_and_exit_2(tmp_path: Path):
    code, output = vidpipe("model", "check", "ssdlite-person", "--video", tmp_path / "no.mp4")
    assert code == 2 and "no such file" in output and "Traceback" not in output


@pytest.mark.slow
def test_person_recall_on_the_harder_clip_is_the_reference_paths(tmp_path: Path):
    """``vidpipe run`` finds people in the frames the model finds them in when run directly
    on the card's preprocessing (within one frame), and the clip is hard: not every frame."""
    clip = make_hard_clip(tmp_path / "hard.mp4")
    truth = load_truth(clip)
    path, spec = resolve_model("ssdlite-person")
    direct = [{"frame": i, "detections": [{"label": spec.label(int(c)), "score": float(s)}
                                          for s, c in zip(d.score, d.class_id, strict=True)]}
              for i, d in enumerate(reference_detections(path, spec, clip))]
    reference = score_person_frames(direct, truth)
    code, output = vidpipe("run", clip, "--out", tmp_path / "out")
    assert code == 0, output
    lines = [json.loads(x) for x in (tmp_path / "out" / "detections.jsonl").read_text()
             .splitlines()]
    pipeline = score_person_frames(lines, truth)
    assert pipeline.missing_lines == 0
    assert abs(pipeline.person_hits - reference.person_hits) <= 1, (pipeline, reference)
    assert abs(pipeline.false_hits - reference.false_hits) <= 1, (pipeline, reference)
    assert 0.3 < reference.hit_rate < 0.95, reference  # a clip that tells paths apart
