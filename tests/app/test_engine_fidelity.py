"""The engine hands frames on in runs and batches (a quiet camera's skipped frames leave their
decoder thread together, files several frames a call, inference several at once): on the same
clip, every line — boxes, track ids, counts, skipped and predicted frames — and every event is
what the engine gives handing frames on one at a time, frame by frame. A quiet stretch's one
line (the default) stands for the lines of its frames, and replays to the same counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.run.replay import replay_run
from app.run.request import RunRequest, run_request
from pipelines.sinks.quiet import unfold
from pipelines.synthetic.quiet import make_quiet_clip


@pytest.fixture(scope="module")
def visited(tmp_path_factory) -> Path:
    """20 s of a quiet camera (15 fps, 640x360) with visitors and long quiet stretches."""
    return make_quiet_clip(tmp_path_factory.mktemp("fidelity") / "visited.mp4", seconds=20,
                           seed=3, active=0.3)


def run(clip: Path, out: Path, every_line: bool = True) -> tuple[list[dict], list[dict]]:
    run_request(RunRequest(sources=[str(clip)], out=out, track="bytetrack", motion="auto",
                           lines=["gate=320,0,320,360"],
                           zones=["door=100,100,500,100,500,340,100,340"],
                           settings={"plan_cache": False}, every_line=every_line))
    lines = [json.loads(x) for x in (out / "detections.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    for line in lines:
        del line["time"]  # when it was decoded
    for event in events:
        for key in ("id", "time", "object"):  # made of the moment, and random
            event.pop(key, None)
    return lines, events


def test_frames_in_runs_and_batches_give_every_line_and_event_of_frames_one_at_a_time(
        visited, tmp_path, monkeypatch):
    lines, events = run(visited, tmp_path / "runs")
    monkeypatch.setattr("pipelines.decode.selection.SKIP_RUN_S", 0.0)
    monkeypatch.setattr("pipelines.decode.stage.FILE_READ_AHEAD", 1)
    monkeypatch.setattr("pipelines.decode.stage.MOST_PICTURES_PER_CALL", 1)
    one_by_one, one_by_one_events = run(visited, tmp_path / "one-by-one")
    assert [x["frame"] for x in lines] == list(range(20 * 15))
    assert sum(x.get("skipped") == "idle" for x in lines) > 100  # the quiet stretches
    assert sum(bool(x["detections"]) for x in lines) > 20  # the visitors
    assert any(e["type"] == "line_cross" for e in events)
    for mine, theirs in zip(lines, one_by_one, strict=True):
        assert mine == theirs, mine["frame"]
    assert events == one_by_one_events


def test_a_quiet_stretchs_line_stands_for_its_frames_and_replays_the_same(visited, tmp_path):
    every, events = run(visited, tmp_path / "every", every_line=True)
    folded, folded_events = run(visited, tmp_path / "folded", every_line=False)
    assert folded_events == events
    skipped = sum(x.get("skipped") == "idle" for x in every)
    assert len(every) - len(folded) > skipped * 3 / 4  # most skipped frames' lines folded
    runs = [x["skipped_run"] for x in folded if "skipped_run" in x]
    assert runs and all(2 <= r["frames"] <= 16 for r in runs)  # first to last: 1 s at most
    unfolded = [line for x in folded for line in unfold(x)]
    assert [x["frame"] for x in unfolded] == [x["frame"] for x in every]
    written = {x["frame"] for x in folded}
    for mine, theirs in zip(unfolded, every, strict=True):
        if mine["frame"] in written:  # a line written: the same line, less its skipped_run
            assert mine == theirs
        else:  # a folded frame's: no boxes, skipped, its pts spread evenly
            assert mine["skipped"] == theirs["skipped"] == "idle"
            assert mine["detections"] == theirs["detections"] == []
            assert abs(mine["pts"] - theirs["pts"]) <= 2e-6, mine["frame"]
    replayed = [replay_run(tmp_path / name) for name in ("every", "folded")]
    assert replayed[0]["frames"] == replayed[1]["frames"] == len(every)
    assert replayed[0]["streams"] == replayed[1]["streams"]
