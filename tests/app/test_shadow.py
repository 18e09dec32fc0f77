"""`vidpipe run --shadow` (issue 38): a candidate model beside the run's on the same frames —
its agreement the figure `vidpipe model check` gives on those frames, its share of the
frames, and a candidate that cannot be compared said in one line."""

import json

import pytest

from models.data import CLIP_SIZE
from models.tracking_data import make_tracking_clip
from tests.app.test_cli import read_jsonl
from tests.support.cli import vidpipe, vidpipe_model

INT8 = "models/zoo/shapes-yolo/model.int8.onnx"


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    return make_tracking_clip(tmp_path_factory.mktemp("lanes") / "lanes.mp4", clip=1,
                              frames=60, size=CLIP_SIZE)


def test_the_candidates_agreement_is_model_checks_on_the_same_frames(lanes, tmp_path):
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--shadow", INT8,
                           "--out", tmp_path / "run")
    assert code == 0, output
    assert "--shadow: the candidate beside the model" in output
    shadow = json.loads((tmp_path / "run" / "summary.json").read_text())["shadow"]
    code, output = vidpipe_model("check", INT8, "--video", lanes, "--frames", "60", "--json",
                                 "--min-agreement", "0")
    assert code == 0, output
    check = json.loads(output.strip().splitlines()[-1])["fp32"]  # the INT8 file against FP32
    assert shadow["agreement"]["frames"] == check["frames"] == 60
    assert shadow["agreement"]["frame_agreement"] == check["frame_agreement"]
    assert shadow["agreement"]["frames_agreeing"] == check["frames_agreeing"]
    assert shadow["detections"]["current"]["boxes"] == check["boxes_reference"]
    assert shadow["detections"]["candidate"]["boxes"] == check["boxes_pipeline"]
    assert shadow["candidate_cpu_ms_per_frame"] > 0
    # the run's own outputs stay the run model's: the same lines as a run without it
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--out", tmp_path / "alone")
    assert code == 0, output
    def untimed(run: str) -> list[dict]:
        return [{k: v for k, v in line.items() if k != "time"}
                for line in read_jsonl(tmp_path / run / "detections.jsonl")]

    assert untimed("run") == untimed("alone")


def test_a_share_gives_the_candidate_every_nth_frame(lanes, tmp_path):
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--shadow", INT8,
                           "--shadow-share", "0.25", "--out", tmp_path)
    assert code == 0, output
    shadow = json.loads((tmp_path / "summary.json").read_text())["shadow"]
    assert shadow["frames_offered"] == 60 and shadow["agreement"]["frames"] == 15


def test_a_candidate_with_no_class_in_common_is_one_line(lanes, tmp_path):
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--shadow",
                           "ssdlite-person", "--out", tmp_path / "o")
    assert code == 2, output
    assert "shares no class with shapes-yolo" in output
    assert not (tmp_path / "o").exists()
