"""A candidate model beside a shared detector (issue 38): started over the API, compared on
the live frames within its CPU budget, reported per stream, refused where it cannot run, and
discarded."""

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from models.data import CLIP_SIZE
from models.tracking_data import make_tracking_clip
from tests.app.test_api import wait_for
from tests.support.api import LOCAL

ZOO = Path(__file__).parents[2] / "models" / "zoo"
INT8 = str(ZOO / "shapes-yolo" / "model.int8.onnx")


@pytest.fixture(scope="module")
def lanes_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    make_tracking_clip(root / "lanes.mp4", clip=2, frames=150, size=CLIP_SIZE)
    return root


def _service(lanes_root: Path, tmp_path: Path, **settings) -> TestClient:
    config = ServiceConfig(media_roots=[lanes_root], results_dir=tmp_path / "results",
                           model="shapes-yolo", model_roots=[ZOO], state_dir=tmp_path / "s",
                           **settings)
    return TestClient(create_app(config), base_url=LOCAL)


def test_a_candidate_is_compared_on_the_live_frames_and_discarded(lanes_root, tmp_path):
    with _service(lanes_root, tmp_path) as client:
        for sid in ("a", "b"):
            assert client.post("/api/streams", json={"url": str(lanes_root / "lanes.mp4"),
                                                     "id": sid}).status_code == 201
        (detector,) = client.get("/api/stats").json()["detectors"]
        url = f"/api/detectors/{detector['id']}/candidate"
        assert client.get(url).status_code == 409  # none yet
        started = client.post(url, json={"model": INT8, "share": 1.0, "cpu_budget": 2.0})
        assert started.status_code == 201, started.text
        assert started.json()["candidate_file"] == "model.int8.onnx"
        again = client.post(url, json={"model": INT8})
        assert again.status_code == 409 and "discard it first" in again.json()["detail"]

        def compared():
            report = client.get(url).json()
            return report if report["agreement"]["frames"] >= 30 else None

        report = wait_for(compared, timeout=60)
        assert set(report["streams"]) == {"a", "b"}
        assert 0.0 <= report["agreement"]["frame_agreement"] <= 1.0
        assert report["detections"]["candidate"]["boxes"] > 0
        assert report["candidate_cpu_ms_per_frame"] > 0 and report["error"] is None
        assert client.delete(url).status_code == 204
        assert client.get(url).status_code == 409
        assert client.get("/api/detectors/nope@cpu/candidate").status_code == 404


def test_a_candidate_holds_to_its_cpu_budget(lanes_root, tmp_path):
    with _service(lanes_root, tmp_path) as client:
        client.post("/api/streams", json={"url": str(lanes_root / "lanes.mp4"), "id": "a"})
        (detector,) = client.get("/api/stats").json()["detectors"]
        url = f"/api/detectors/{detector['id']}/candidate"
        assert client.post(url, json={"model": INT8, "share": 1.0,
                                      "cpu_budget": 0.01}).status_code == 201

        def offered_120():  # four seconds of a 30 frames/s camera, taken or passed over
            report = client.get(url).json()
            seen = report["agreement"]["frames"] + sum(report["passed_over"].values())
            return report if seen >= 120 else None

        report = wait_for(offered_120, timeout=60)
        # a frame's cost at most over: the budget is checked before each frame it takes
        assert report["cpu_share"] <= 0.01 + (report["candidate_cpu_ms_per_frame"] / 1000
                                              / report["running_s"])
        assert report["agreement"]["frames"] > 0
        # 0.01 of a core takes fewer than half of 120 frames unless a frame costs under
        # 0.7 ms (this model: 2-4 ms on the machines we run): the rest passed over
        assert sum(report["passed_over"].values()) > report["agreement"]["frames"]


@pytest.mark.parametrize("body, status, words", [
    ({"model": "/etc/passwd"}, 400, "model root"),
    ({"model": "ssdlite-person"}, 400, "shares no class"),
    ({"model": "shapes-yolo", "share": 0}, 422, "share"),
])
def test_a_candidate_that_cannot_run_is_refused(lanes_root, tmp_path, body, status, words):
    with _service(lanes_root, tmp_path) as client:
        client.post("/api/streams", json={"url": str(lanes_root / "lanes.mp4"), "id": "a"})
        (detector,) = client.get("/api/stats").json()["detectors"]
        answer = client.post(f"/api/detectors/{detector['id']}/candidate", json=body)
        assert answer.status_code == status and words in answer.text, answer.text


def swap_figures(results_dir: Path, streams: list[str]) -> dict:
    """Per stream, from its results file: the models in the order they named its lines, how
    often that changed, and the longest step of its timeline between two lines."""
    import json

    figures = {}
    for sid in streams:
        lines = [json.loads(x) for x in
                 (results_dir / sid / "detections.jsonl").read_text().splitlines()]
        models = [line.get("model") for line in lines]
        changes = sum(a != b for a, b in zip(models, models[1:], strict=False))
        swap = next((i for i, m in enumerate(models) if m != models[0]), len(lines))
        around = lines[max(0, swap - 20):swap + 20]  # 20 frames each side of the swap
        steps = [b["pts"] - a["pts"] for a, b in zip(around, around[1:], strict=False)]
        missing = sum(b["frame"] - a["frame"] - 1
                      for a, b in zip(around, around[1:], strict=False))
        figures[sid] = {"models": list(dict.fromkeys(models)), "changes": changes,
                        "longest_step_s": round(max(steps, default=0.0), 6),
                        "frames_missing": missing, "lines": len(lines)}
    return figures


def test_promotion_under_eight_cameras_drops_no_frame_and_leaves_no_gap(tmp_path):
    """Issue 38's acceptance: 8 files played as 5 fps cameras on the FP32 model, its INT8
    file compared beside it, then promoted in its place while they run: no frame dropped,
    no step of any stream's results longer than a frame interval, each stream's model
    changes once; a restart keeps the INT8 file. 5 fps: 8 cameras at 10 fps are more than
    CI's slowest machine holds (AMD EPYC, AVX2 only: one 30 fps camera of the shapes model
    costs it 0.9 of a core), and a machine that sheds frames for load would hide what the
    swap does."""
    fps = 5
    root = tmp_path / "media"
    root.mkdir()
    _camera_clip(root / "lanes.mp4", fps=fps)
    streams = [f"cam{k}" for k in range(8)]
    with _service(root, tmp_path) as client:
        for sid in streams:
            assert client.post("/api/streams", json={"url": str(root / "lanes.mp4"),
                                                     "id": sid}).status_code == 201
        (detector,) = client.get("/api/stats").json()["detectors"]
        url = f"/api/detectors/{detector['id']}/candidate"
        assert client.post(url + "/promote").status_code == 409  # no candidate yet
        assert client.post(url, json={"model": INT8, "share": 0.1}).status_code == 201
        time.sleep(5)  # the cameras caught up after their start
        promoted = client.post(url + "/promote")
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["candidate"] is None  # it is the model now
        time.sleep(4)
        headroom = client.get("/api/stats").json()["headroom"]  # said where it fails
        for sid in streams:
            assert client.delete(f"/api/streams/{sid}").status_code == 204
    figures = swap_figures(tmp_path / "results", streams)
    for sid, f in figures.items():
        assert f["models"] == ["model.onnx", "model.int8.onnx"] and f["changes"] == 1, f
        # about the swap: every frame there, a frame interval apart
        assert f["frames_missing"] == 0 and f["longest_step_s"] <= 1 / fps + 1e-6, \
            (sid, f, headroom)
    again = tmp_path / "results" / "again" / "detections.jsonl"
    with _service(root, tmp_path) as client:  # the choice outlives the service
        client.post("/api/streams", json={"url": str(root / "lanes.mp4"), "id": "again"})
        wait_for(lambda: again.is_file() and len(again.read_text().splitlines()) >= 5,
                 timeout=30)
        client.delete("/api/streams/again")
    assert swap_figures(tmp_path / "results", ["again"])["again"]["models"] == \
        ["model.int8.onnx"]


def _camera_clip(path: Path, fps: int, frames: int = 100) -> Path:
    """A tracking clip encoded as most cameras send it: no B-frames (``zerolatency``) and a
    key frame every second (a camera that falls behind skips to the next one: one group of
    pictures for the whole clip would skip to its end)."""
    import av

    from models.tracking_data import tracking_frames

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={
            "preset": "veryfast", "tune": "zerolatency", "crf": "20", "g": str(fps),
            "keyint_min": str(fps)})
        stream.width, stream.height, stream.pix_fmt = 320, 192, "yuv420p"
        for image, _ in tracking_frames(2000, 3, frames, (320, 192), occluded=False):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode(None))
    return path



def test_only_a_model_of_the_same_card_can_take_the_detectors_place():
    from types import SimpleNamespace

    from models.zoo import resolve_model
    from pipelines.errors import ConfigError
    from pipelines.shared.promotion import check_promotable

    path, spec = resolve_model("shapes-yolo")
    detector = SimpleNamespace(spec=spec)
    check_promotable(detector, path, spec)  # the same card: its INT8 or pruned files
    wider = spec.model_copy(update={"input": spec.input.model_copy(update={"width": 640})})
    with pytest.raises(ConfigError, match="give the streams the new model instead"):
        check_promotable(detector, path, wider)
