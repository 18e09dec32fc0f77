"""`vidpipe model ...` from the outside: train, clips, evaluate through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.data import boxes_path, load_boxes, make_clip
from models.spec import ZOO_DIR, load_card
from tests.support.cli import vidpipe_model


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A model trained for two steps, exported, and scored on one short held-out clip."""
    out = tmp_path_factory.mktemp("tiny")
    code, output = vidpipe_model("train", "--out", out, "--steps", 2, "--batch-size", 2,
                                 "--eval-clips", 1, "--eval-frames", 4)
    assert code == 0, output
    return out


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "held.mp4", seed=4242, frames=12,
                     size=(320, 192))


def test_train_writes_weights_graph_card_and_log_with_measured_figures(tiny_run: Path) -> None:
    for name in ("model.pt", "model.onnx", "card.yaml", "train_log.json"):
        assert (tiny_run / name).is_file(), name
    card = load_card(tiny_run / "card.yaml")
    assert card.output.format == "yolov8" and len(card.classes) == 5
    measured = card.measured
    assert measured["training"]["steps"] == 2 and not measured["training"]["stopped_early"]
    assert measured["heldout"]["seed"] == 1000 and 0.0 <= measured["heldout"]["mAP@0.5"] <= 1.0
    assert measured["onnxruntime_fp32"]["median_ms"] > 0
    log = json.loads((tiny_run / "train_log.json").read_text())
    assert log["steps_done"] == 2 and log["history"][-1]["step"] == 2
    assert load_boxes(boxes_path(tiny_run / "heldout" / "clip-0.mp4"))["frames"]


def test_evaluate_scores_every_frame_of_the_clip(tiny_run: Path, clip: Path,
                                                 tmp_path: Path) -> None:
    code, output = vidpipe_model("evaluate", tiny_run, "--video", clip, "--out", tmp_path)
    assert code == 0, output
    accuracy = json.loads((tmp_path / "accuracy.json").read_text())
    truth = load_boxes(boxes_path(clip))
    assert accuracy["overall"]["frames"] == 12
    assert accuracy["overall"]["objects"] == sum(len(f) for f in truth["frames"])
    lines = (tmp_path / "detections.jsonl").read_text().splitlines()
    assert accuracy["overall"]["detections"] == sum(len(json.loads(x)["detections"])
                                                   for x in lines)
    assert "mAP@0.5:0.95" in output and "held" in output


@pytest.mark.skipif(not (ZOO_DIR / "shapes-yolo" / "card.yaml").is_file(),
                    reason="the shipped shapes-yolo model is not built yet")
def test_shipped_model_finds_the_shapes_in_a_held_out_clip(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "held.mp4", seed=31337, frames=20)
    code, output = vidpipe_model("evaluate", "shapes-yolo", "--video", clip, "--out",
                                 tmp_path / "run")
    assert code == 0, output
    accuracy = json.loads((tmp_path / "run" / "accuracy.json").read_text())
    assert accuracy["overall"]["mAP@0.5"] > 0.8, accuracy


@pytest.mark.skipif(not (ZOO_DIR / "shapes-yolo" / "model.int8.onnx").is_file(),
                    reason="the shipped shapes-yolo variants are not built yet")
def test_without_labels_a_variant_is_scored_by_agreement_with_fp32(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "footage.mp4", seed=777, frames=20)
    boxes_path(clip).unlink()  # a user's footage: no labels
    runs = {}
    for name in ("model.onnx", "model.int8.onnx"):
        code, output = vidpipe_model("evaluate", ZOO_DIR / "shapes-yolo" / name, "--video",
                                     clip, "--out", tmp_path / name)
        assert code == 0, output
        assert "agreement with model.onnx" in output
        runs[name] = json.loads((tmp_path / name / "accuracy.json").read_text())
    fp32, int8 = runs["model.onnx"], runs["model.int8.onnx"]
    assert fp32["scored_against"] == "reference detections"
    assert fp32["overall"]["objects"] > 20  # the FP32 model's own detections are the truth
    assert fp32["overall"]["mAP@0.5"] == pytest.approx(1.0)  # it agrees with itself
    assert 0.8 < int8["overall"]["mAP@0.5"] < 1.0


def test_labels_can_be_given_explicitly(tiny_run: Path, clip: Path, tmp_path: Path) -> None:
    moved = tmp_path / "labels.json"
    moved.write_text(boxes_path(clip).read_text())
    code, output = vidpipe_model("evaluate", tiny_run, "--video", clip, "--labels", moved,
                                 "--out", tmp_path / "run")
    assert code == 0, output


def one_error_line(output: str) -> str:
    """The one ``error:`` line (a progress bar may have drawn before the failure)."""
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    return errors[0]


def test_a_model_file_that_is_not_onnx_exits_2(clip: Path, tmp_path: Path,
                                               tiny_run: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.onnx").write_text("this is not a model")
    (folder / "card.yaml").write_text((tiny_run / "card.yaml").read_text())
    code, output = vidpipe_model("evaluate", folder, "--video", clip, "--out", tmp_path / "o")
    assert code == 2
    assert "not an ONNX model" in one_error_line(output)


def test_an_unreadable_video_exits_2(tiny_run: Path, tmp_path: Path) -> None:
    video = tmp_path / "junk.mp4"
    video.write_bytes(b"\x00" * 1000)
    boxes_path(video).write_text(json.dumps({"frames": [[]]}))
    code, output = vidpipe_model("evaluate", tiny_run, "--video", video, "--out", tmp_path / "o")
    assert code == 2
    assert "junk.mp4" in one_error_line(output)


@pytest.mark.parametrize("problem, message", [
    ("classes", "labels name classes"),
    ("short", "labels cover 3 frames"),
])
def test_labels_that_do_not_fit_exit_2(tiny_run: Path, clip: Path, tmp_path: Path,
                                       problem: str, message: str) -> None:
    video = tmp_path / "clip.mp4"
    video.write_bytes(clip.read_bytes())
    record = load_boxes(boxes_path(clip))
    if problem == "classes":
        record["classes"] = ["cat", "dog", "bird", "fish", "cow"]
    if problem == "short":
        record["frames"], record["ignore"] = record["frames"][:3], record["ignore"][:3]
    if problem != "missing":
        boxes_path(video).write_text(json.dumps(record))
    code, output = vidpipe_model("evaluate", tiny_run, "--video", video, "--out", tmp_path / "o")
    assert code == 2
    assert message in one_error_line(output)


def test_bad_training_options_exit_2(tmp_path: Path) -> None:
    code, output = vidpipe_model("train", "--out", tmp_path, "--activation", "tanh")
    assert code == 2 and "--activation" in one_error_line(output)
    code, output = vidpipe_model("train", "--out", tmp_path, "--steps", 0)
    assert code == 2 and "steps" in one_error_line(output)


def test_clips_command_writes_labelled_clips(tmp_path: Path) -> None:
    code, output = vidpipe_model("clips", "--out", tmp_path, "--count", 2, "--frames", 3,
                                 "--size", "160x96")
    assert code == 0, output
    for k in range(2):
        record = load_boxes(boxes_path(tmp_path / f"clip-{k}.mp4"))
        assert len(record["frames"]) == 3 and record["width"] == 160


@pytest.mark.slow
def test_optimize_writes_every_variant_and_prints_the_table(tiny_run: Path,
                                                            tmp_path: Path) -> None:
    held = tiny_run / "heldout" / "clip-0.mp4"
    code, output = vidpipe_model("optimize", tiny_run, "--calib", held, "--ratio", "0.5",
                                 "--prune-steps", 2, "--no-distill", "--out", tmp_path)
    assert code == 0, output
    assert json.loads((tiny_run / "model.pruned50.json").read_text())["config"]["distill"] is False
    assert "--no-distill" in (tiny_run / "card.yaml").read_text()
    for name in ("model.int8.onnx", "model.pruned50.onnx", "model.pruned50.pt",
                 "model.pruned50.int8.onnx"):
        assert (tiny_run / name).is_file(), name
    report = json.loads((tmp_path / "optimize.json").read_text())
    rows = {r["label"]: r for r in report["variants"]}
    assert list(rows) == ["fp32", "int8", "pruned50", "pruned50+int8"]
    assert rows["pruned50"]["parameters"] < 0.4 * rows["fp32"]["parameters"]
    assert rows["pruned50"]["gflops"] < 0.5 * rows["fp32"]["gflops"]
    assert all(r["latency_ms"] > 0 and r["accuracy"]["frames"] == 4 for r in rows.values())
    # each method scored, or failed with the reason (a two-step model has dead, all-zero
    # activations, which a histogram calibrator may not handle)
    tried = report["calibration_methods"]["fp32"]
    assert set(tried) == {"minmax", "entropy", "percentile"}
    assert all("mAP@0.5" in r or r["failed"] for r in tried.values())
    assert report["scored_by"].startswith("mAP against the clips' labels")
    assert "Variants" in output and "refused" not in output


def test_prune_takes_a_pruned_network_on_from_the_one_beside_the_model(tiny_run: Path,
                                                                       tmp_path: Path) -> None:
    for name in ("model.onnx", "card.yaml", "model.pt"):
        (tmp_path / name).write_bytes((tiny_run / name).read_bytes())
    code, output = vidpipe_model("prune", tmp_path, "--ratio", "0.5", "--steps", 2)
    assert code == 0, output
    code, output = vidpipe_model("prune", tmp_path, "--ratio", "0.7", "--from", "0.5",
                                 "--steps", 2)
    assert code == 0, output
    assert "pruned 70" in output and "(deep-first)" in output
    half = json.loads((tmp_path / "model.pruned50.json").read_text())
    on = json.loads((tmp_path / "model.pruned70.json").read_text())
    assert on["channels"][0] == half["channels"][0]  # both counted against the unpruned one
    assert on["channels"][1] < half["channels"][1]
    assert on["parameters"][0] == half["parameters"][1]  # started from the 50% network


@pytest.mark.parametrize("args, message", [
    (["prune", "{run}", "--ratio", "1.5"], "--ratio must be in"),
    (["prune", "{run}", "--ratio", "0"], "--ratio must be in"),
    (["prune", "{run}", "--ratio", "0.7", "--allocation", "random"], "--allocation must be"),
    (["prune", "{fresh}", "--ratio", "0.7", "--from", "0.5"], "no model.pruned50.pt beside"),
    (["prune", "{run}", "--ratio", "0.5", "--from", "0.7"], "--from must be a ratio below"),
    (["optimize", "{run}", "--calib", "{junk}", "--allocation", "even"], "--allocation must be"),
    (["optimize", "{run}", "--calib", "{junk}", "--ratio", "0.5,2"], "--ratio must be in"),
    (["quantize", "{run}", "--calib", "{junk}"], "junk.mp4"),
    (["optimize", "{run}", "--calib", "{junk}"], "junk.mp4"),
    (["quantize", "{run}", "--calib", "{missing}"], "missing.mp4"),
    (["quantize", "{run}", "--calib", "{junk}", "--method", "median"], "--method"),
    (["quantize", "{broken}", "--calib", "{junk}"], "not an ONNX model"),
    (["prune", "{broken}"], "not an ONNX model"),
    (["optimize", "{nopt}", "--calib", "{junk}"], "model.pt"),
    (["build-engine", "{run}", "--precision", "int4"], "--precision"),
    (["build-engine", "{run}", "--precision", "int8"], "needs --calib"),
])
def test_bad_optimisation_input_is_one_line_and_exit_2(tiny_run: Path, tmp_path: Path,
                                                       args: list[str], message: str) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00" * 2000)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_text("this is not a model")
    (broken / "card.yaml").write_text((tiny_run / "card.yaml").read_text())
    nopt = tmp_path / "nopt"
    nopt.mkdir()
    for name in ("model.onnx", "card.yaml"):
        (nopt / name).write_bytes((tiny_run / name).read_bytes())
    fresh = tmp_path / "fresh"  # never pruned (tiny_run may have been, by another test)
    fresh.mkdir()
    for name in ("model.onnx", "card.yaml", "model.pt"):
        (fresh / name).write_bytes((tiny_run / name).read_bytes())
    places = {"run": tiny_run, "junk": junk, "broken": broken, "nopt": nopt, "fresh": fresh,
              "missing": tmp_path / "missing.mp4"}
    code, output = vidpipe_model(*[a.format(**places) for a in args])
    assert code == 2, output
    assert message in one_error_line(output)
