"""`vidpipe run` from the outside: outputs, several streams, and bad input."""

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pipelines.options import PipelineOptions
from tests.support.cli import vidpipe
from tests.support.media import remux


def read_jsonl(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def decoded_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_run_writes_one_line_per_frame_in_order_and_an_annotated_video(small_clip, tmp_path):
    code, output = vidpipe("run", small_clip, "--out", tmp_path, "--annotate")
    assert code == 0, output
    lines = read_jsonl(tmp_path / "detections.jsonl")
    assert [line["frame"] for line in lines] == list(range(60))
    assert all(line["stream"] == "small" for line in lines)
    assert lines[1]["pts"] == pytest.approx(1 / 30, abs=1e-4)
    assert decoded_frames(tmp_path / "annotated.mp4") == 60
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["streams"]["small"]["outcomes"] == {"processed": 60}
    assert {s["stage"] for s in summary["stages"]} == {
        "decode", "preprocess", "infer", "postprocess", "sink"}
    for word in ("Per-stage latency", "infer", "p99", "Streams"):
        assert word in output
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize("copies", [2, 4])
def test_several_clips_at_once_every_frame_accounted_and_batched(small_clip, wide_clip,
                                                                 tmp_path, copies):
    clips = [small_clip, wide_clip] * (copies // 2)
    # no latency budget: on a slow CPU it caps the default model's batches at 1 frame
    code, output = vidpipe("run", *clips, "--out", tmp_path, "--batch-size", 4,
                           "--batch-timeout-ms", 50, "--latency-budget-ms", 0)
    assert code == 0, output
    lines = read_jsonl(tmp_path / "detections.jsonl")
    summary = json.loads((tmp_path / "summary.json").read_text())
    expected = {"small": 60, "wide": 45, "small-2": 60, "wide-2": 45}
    expected = dict(list(expected.items())[:copies])
    assert set(summary["streams"]) == set(expected)
    for sid, frames in expected.items():
        assert [x["frame"] for x in lines if x["stream"] == sid] == list(range(frames))
        assert summary["streams"][sid]["received"] == frames
        assert summary["streams"][sid]["outcomes"] == {"processed": frames}
    assert any(int(size) > 1 for size in summary["batch_sizes"])


def tiny_yolov8(path: Path, box_xyxy, class_id: int, size=(64, 48), classes=3) -> Path:
    """A yolov8-format ONNX whose output is one fixed box (input pixels) plus the input's mean
    times zero, so the graph really depends on its input."""
    w, h = size
    n = 8
    pred = np.zeros((1, 4 + classes, n), np.float32)
    x1, y1, x2, y2 = box_xyxy
    pred[0, :4, 0] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
    pred[0, 4 + class_id, 0] = 0.9
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
        helper.make_node("Mul", ["m", "zero"], ["z"]),
        helper.make_node("Add", ["pred", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 + classes, n])],
        initializer=[helper.make_tensor("pred", TensorProto.FLOAT, pred.shape, pred.ravel()),
                     helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_users_yolov8_onnx_runs_with_format_and_classes(wide_clip, tmp_path):
    # wide_clip is 400x160; into a 64x48 input it is drawn 64x26 (160 * 0.16 = 25.6 -> 26 px)
    # with 11 px of padding above, so x scales by 64/400 and y by 26/160.
    model = tiny_yolov8(tmp_path / "tiny.onnx", (16, 16 + 0, 32, 24), class_id=2)
    names = tmp_path / "names.txt"
    names.write_text("cat\ndog\nbird\n")
    code, output = vidpipe("run", wide_clip, "--model", model, "--format", "yolov8",
                           "--classes", names, "--out", tmp_path / "out", "--batch-size", 1)
    assert code == 0, output
    lines = read_jsonl(tmp_path / "out" / "detections.jsonl")
    assert len(lines) == 45
    det = lines[0]["detections"]
    assert [d["label"] for d in det] == ["bird"]
    sx, sy, pad_y = 64 / 400, 26 / 160, 11
    expected = [16 / sx, (16 - pad_y) / sy, 32 / sx, (24 - pad_y) / sy]
    assert det[0]["box"] == pytest.approx(expected, abs=0.05)


def test_a_truncated_video_processes_what_decodes_and_counts_the_rest(small_clip, tmp_path):
    faststart = remux(small_clip, tmp_path / "fast.mp4", options={"movflags": "faststart"})
    data = faststart.read_bytes()
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    code, output = vidpipe("run", truncated, "--out", tmp_path / "out")
    assert code == 0, output
    assert "decode_error" in output and "truncated" in output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    outcomes = summary["streams"]["truncated"]["outcomes"]
    assert 0 < outcomes["processed"] < 60
    assert outcomes["processed"] + outcomes["decode_error"] == 60
    lines = read_jsonl(tmp_path / "out" / "detections.jsonl")
    assert len(lines) == outcomes["processed"]


def bad_inputs(tmp: Path, clip: Path):
    text = tmp / "notes.mp4"
    text.write_text("not a video\n")
    not_onnx = tmp / "model.onnx"
    not_onnx.write_text("not a model\n")
    ssd = Path("models/zoo/ssdlite-person/model.onnx")
    names = tmp / "names.txt"
    names.write_text("person\n")
    return {
        "missing file": (["run", tmp / "nope.mp4"], "no such file"),
        "not a video": (["run", text], "not a video"),
        "not onnx": (["run", clip, "--model", not_onnx, "--format", "yolov8"], "not an ONNX"),
        "mismatched model": (["run", clip, "--model", ssd, "--format", "yolov8",
                              "--classes", names, "--input-size", "300x300"], "yolov8 expects"),
        "unknown zoo name": (["run", clip, "--model", "nosuchmodel"], "zoo"),
        "unknown device": (["run", clip, "--device", "tpu"], "unknown device 'tpu'"),
        "out is a file": (["run", clip, "--out", text], "exists and is not a folder"),
        "bad batch size": (["run", clip, "--batch-size", "0"], "batch size"),
        "bad input size": (["run", clip, "--model", not_onnx, "--format", "yolov8",
                            "--input-size", "big"], "--input-size"),
    }


@pytest.mark.parametrize("case", [
    "missing file", "not a video", "not onnx", "mismatched model", "unknown zoo name",
    "unknown device", "out is a file", "bad batch size", "bad input size"])
def test_bad_input_is_one_clear_line_and_exit_2_with_no_output_left(case, small_clip, tmp_path):
    args, expected = bad_inputs(tmp_path, small_clip)[case]
    out = tmp_path / "out"
    code, output = vidpipe(*args, *([] if "--out" in args else ["--out", out]))
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], output
    assert "Traceback" not in output
    assert not out.exists() or not any(out.iterdir())


def test_console_script_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "run", str(tmp_path / "x.mp4")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_help_explains_every_option():
    code, output = vidpipe("run", "--help")
    assert code == 0
    for option in ("--model", "--format", "--classes", "--device", "--out", "--batch-size",
                   "--batch-timeout-ms", "--annotate", "--metrics-port", "--infer-threads"):
        assert option in output


def test_a_cuda_device_without_cuda_falls_back_to_the_cpu_and_says_so(small_clip, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU path is tested in tests/gpu")
    code, output = vidpipe("run", small_clip, "--device", "cuda:0", "--out", tmp_path)
    assert code == 0, output
    assert "running on the CPU" in output and "cuda:0" in output
    assert len((tmp_path / "detections.jsonl").read_text().splitlines()) == 60


def test_run_with_tracking_lines_zones_and_detect_every_2(tmp_path):
    """Issue 18: track ids, predicted frames, per-frame counts, events.jsonl and the summary,
    and an annotated video that still has every frame (the riders keep their pictures)."""
    from models.tracking_data import make_tracking_clip

    clip = make_tracking_clip(tmp_path / "lanes.mp4", clip=5, frames=60, size=(320, 192))
    out = tmp_path / "out"
    code, output = vidpipe("run", clip, "--model", "shapes-yolo", "--out", out, "--annotate",
                           "--line", "middle=160,0,160,192",
                           "--zone", "left=0,0,160,0,160,192,0,192", "--detect-every", "2")
    assert code == 0, output
    lines = read_jsonl(out / "detections.jsonl")
    assert [line["frame"] for line in lines] == list(range(60))
    # 0, 2, 4 ... to the model, and the last frame, which carries the one held for it
    assert [line.get("predicted", False) for line in lines] == [k % 2 == 1 and k < 59
                                                                 for k in range(60)]
    ids = {d["track_id"] for line in lines for d in line["detections"]}
    assert None in ids and len(ids - {None}) >= 2  # unconfirmed at first, then tracks
    assert all("analytics" in line for line in lines)
    summary = json.loads((out / "summary.json").read_text())
    crossings = summary["analytics"]["lines"]["middle"]
    events = read_jsonl(out / "events.jsonl")
    crossed = [e for e in events if e["type"] == "line_cross"]
    assert len(crossed) == crossings["in"] + crossings["out"]
    assert lines[-1]["analytics"]["lines"]["middle"] == crossings
    entered = [e for e in events if e["type"] == "zone_enter"]
    assert len(entered) == summary["analytics"]["zones"]["left"]["entered"] > 0
    assert all(e["track_id"] is not None and e["stream"] == "lanes" for e in entered)
    frames = [e["frame"] for e in events]
    assert frames == sorted(frames)
    assert summary["streams"]["lanes"]["analytics"]["predicted_frames"] == 29
    assert summary["streams"]["lanes"]["outcomes"] == {"processed": 60}
    assert decoded_frames(out / "annotated.mp4") == 60
    assert "analytics" in output and "events.jsonl" in output


def test_run_with_detect_fps_sees_that_rate_of_a_30_fps_clip(tmp_path):
    """Issue 35, item 2: the detector on 10 frames a second of a 30 fps clip, by its clock."""
    from models.tracking_data import make_tracking_clip

    clip = make_tracking_clip(tmp_path / "lanes.mp4", clip=5, frames=60, size=(320, 192))
    out = tmp_path / "out"
    code, output = vidpipe("run", clip, "--model", "shapes-yolo", "--out", out,
                           "--detect-fps", "10")
    assert code == 0, output
    lines = read_jsonl(out / "detections.jsonl")
    assert [line["frame"] for line in lines] == list(range(60))
    seen = [line["frame"] for line in lines if not line.get("predicted", False)]
    assert seen == [*range(0, 60, 3), 59]  # the last carries the frames held for it
    summary = json.loads((out / "summary.json").read_text())
    assert summary["streams"]["lanes"]["outcomes"] == {"processed": 60}


def test_tracking_flags_say_what_is_wrong(small_clip, tmp_path):
    for flags, words in ((["--detect-every", "2", "--detect-fps", "5"], "not both"),
                         (["--line", "door=1,2,3"], "needs 4 numbers"),
                         (["--track", "deepsort"], "expected one of"),
                         (["--zone", "z=0,0,1,1"], "at least 6"),
                         (["--line", "a=0,0,1,1", "--zone", "a=0,0,5,0,5,5"], "unique"),
                         (["--motion", "sometimes"], "expected one of"),
                         (["--mask", "clock=0,0,5,0,5,5"], "it needs --motion"),
                         (["--motion", "pixels", "--mask", "clock=0,0,5"], "at least 6"),
                         (["--motion", "pixels", "--mask", "clock=0,0,9000,0,5,5"],
                          "outside its")):
        code, output = vidpipe("run", small_clip, "--out", tmp_path / "o", *flags)
        assert code == 2 and words in output, (flags, output)


def test_user_text_in_an_error_prints_as_written(tmp_path):
    """File names and messages are never read as console markup ([door] is not a style)."""
    clip = tmp_path / "front[door].mp4"
    code, output = vidpipe("run", clip, "--out", tmp_path / "out")
    assert code == 2
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "front[door].mp4: no such file" in errors[0], output


def test_an_error_naming_an_extra_prints_it(small_clip, tmp_path):
    from models.backends.openvino import openvino_version

    if openvino_version() is not None:  # the message is for machines without OpenVINO
        pytest.skip("OpenVINO is installed here")
    code, output = vidpipe("run", small_clip, "--runtime", "openvino", "--out", tmp_path / "o")
    assert code == 2
    assert "pip install 'vidpipe[openvino]'" in output, output


def test_the_cpu_path_never_imports_torch(small_clip, tmp_path):
    """`vidpipe --help`, `vidpipe version` and a whole CPU run load neither torch nor the
    heavy libraries only other commands use (their figures: docs/BENCHMARKS.md)."""
    script = ("import sys\nfrom app.cli import cli\n"
              "for args in (['--help'], ['version'], ['run', sys.argv[1], '--out', sys.argv[2],"
              " '--log-level', 'warning']):\n"
              "    try:\n        cli(args, standalone_mode=True)\n    except SystemExit as e:\n"
              "        assert not e.code, (args, e.code)\n"
              "heavy = {'torch', 'skimage', 'onnx', 'ray', 'openvino', 'fastapi', 'pycocotools'}\n"
              "print(sorted(heavy & {name.split('.')[0] for name in sys.modules}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(small_clip), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize(("flags", "precision"), [((), "fp32"), (("--precision", "fp16"), "fp16")])
def test_the_gpu_runs_fp32_unless_fp16_is_asked_for(monkeypatch, small_clip, tmp_path, flags,
                                                    precision):
    """FP16 is other arithmetic (2.6% of shapes-yolo's boxes changed on an H200): opted into
    with --precision, which reaches the pipeline's settings."""
    import app.run.request

    asked = []

    def capture(request, **_):
        asked.append(PipelineOptions(**request.settings).precision)
        raise SystemExit(0)

    monkeypatch.setattr(app.run.request, "run_request", capture)
    code, _ = vidpipe("run", small_clip, "--device", "cuda", *flags, "--out", tmp_path / "o")
    assert code == 0 and asked == [precision]
