"""Issue 35, item 3, in the service: a camera with ``motion`` skips the shared detector
while its scene is still — each skipped frame a result line of its own and counted as
``skipped_idle`` — and its masks, changed while it runs, reach the gate."""

from __future__ import annotations

import json

from pipelines.sinks.quiet import frame_records
from pipelines.synthetic.quiet import distractors, make_quiet_clip
from tests.app.test_api import client_for, wait_for


def test_a_still_camera_skips_the_detector_and_says_so(tmp_path):
    root = tmp_path / "media"
    root.mkdir()
    make_quiet_clip(root / "yard.mp4", seconds=6, seed=1)  # a visitor from 3.7 s
    truth = json.loads((root / "yard.truth.json").read_text())
    masks = [{"name": name, "polygon": [[x1, y1], [x2, y1], [x2, y2], [x1, y2]]}
             for name, (x1, y1, x2, y2) in distractors(truth).items()]  # clock and sway
    body = {"url": str(root / "yard.mp4"), "id": "yard", "motion": "pixels",
            "motion_heartbeat_s": 2, "masks": masks}
    with client_for(root) as client:
        bad = client.post("/api/streams", json=body | {"id": "x", "motion": "sometimes"})
        assert bad.status_code == 422 and "motion" in bad.text
        added = client.post("/api/streams", json=body)
        assert added.status_code == 201, added.text
        shown = added.json()["analytics"]
        assert shown["motion"] == "pixels" and shown["motion_heartbeat_s"] == 2
        assert shown["track"] == "botsort"  # implied: motion leaves frames to a tracker
        intake = client.app.state.service.streams["yard"].pipeline.stages[0]
        assert [m.name for m in intake.meter.masks()] == ["clock", "sway"]  # what it reads

        results = root.parent / "results" / "yard" / "detections.jsonl"

        def first_45():
            written = results.read_text().splitlines() if results.exists() else []
            frames = frame_records(written)
            return (written, frames[:45]) if len(frames) >= 45 else None

        written, lines = wait_for(first_45)
        assert any("skipped_run" in x for x in written)  # a quiet stretch is one line
        assert [x["frame"] for x in lines] == list(range(45))  # every frame, in order
        skipped = [x["frame"] for x in lines if x.get("skipped") == "idle"]
        # the first 3 s are still: the first frame and the heartbeats go to the model
        assert len(skipped) >= 35 and 0 not in skipped, skipped
        assert all(not x["detections"] for x in lines if x.get("skipped"))
        metrics = client.get("/metrics").text
        counted = [x for x in metrics.splitlines() if x.startswith("vidpipe_frames_total")
                   and 'stream="yard"' in x and 'outcome="skipped_idle"' in x]
        assert counted and float(counted[0].split()[-1]) >= len(skipped), counted
        put = client.put("/api/streams/yard/analytics", json={"masks": masks[:1]})
        assert put.status_code == 200, put.text
        assert put.json()["analytics"]["motion"] == "pixels"  # kept by the change
        assert put.json()["masks"] == masks[:1]
        assert [m.name for m in intake.meter.masks()] == ["clock"]  # the gate's, at once
