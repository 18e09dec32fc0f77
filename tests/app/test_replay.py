"""Issue 36, item 4: ``vidpipe replay`` runs a run's tracker, lines and zones again from its
detections.jsonl — no decoding, no model — and says how the counts change."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import vidpipe

LINE = "middle=320,0,320,384"
ZONE = "left=0,0,300,0,300,384,0,384"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An occluded lanes clip run with a line and a zone, at every frame and at N = 3."""
    from models.tracking_data import make_tracking_clip

    folder = tmp_path_factory.mktemp("replay")
    clip = make_tracking_clip(folder / "lanes.mp4", clip=7, frames=150, size=(640, 384),
                              occluded=True)
    runs = {}
    for every in (1, 3):
        out = folder / f"every-{every}"
        code, output = vidpipe("run", clip, "--model", "shapes-yolo", "--out", out,
                               "--line", LINE, "--zone", ZONE, "--detect-every", str(every))
        assert code == 0, output
        runs[every] = out
    return runs


def _replayed(*args):
    code, output = vidpipe("replay", *args, "--json")
    assert code == 0, output
    return json.loads(output[output.index("{"):])


@pytest.mark.parametrize("every", [1, 3])
def test_a_replay_with_the_runs_own_settings_gives_its_counts_and_events(runs, every):
    report = _replayed(runs[every])
    stream = report["streams"]["lanes"]
    line = stream["lines"]["middle"]
    assert line["recorded"] == line["replayed"]
    assert sum(line["replayed"].values()) > 0  # it counts something to agree on
    zone = stream["zones"]["left"]
    assert zone["recorded"] == zone["replayed"] and zone["replayed"]["entered"] > 0
    for kind, counts in stream["events"].items():
        assert counts["recorded"] == counts["replayed"], kind
    assert report["frames"] == 150


def test_a_moved_line_and_another_tracker_are_counted_without_the_model(runs):
    summary = json.loads((runs[1] / "summary.json").read_text())
    assert summary["streams"]["lanes"]["analytics_config"]["lines"][0]["name"] == "middle"
    dwell = summary["streams"]["lanes"]["analytics"]["zones"]["left"]["dwell"]  # item 5
    assert dwell["visits"] >= 1 and 0 < dwell["p50_s"] <= dwell["max_s"]
    moved = _replayed(runs[1], "--line", "middle=120,0,120,384")
    line = moved["streams"]["lanes"]["lines"]["middle"]
    assert line["replayed"] != line["recorded"]  # the objects cross x=120 otherwise
    assert moved["streams"]["lanes"]["zones"]["left"]["recorded"] == \
        moved["streams"]["lanes"]["zones"]["left"]["replayed"]  # zones kept as they were
    other = _replayed(runs[1], "--track", "sort")
    assert other["streams"]["lanes"]["track"] == "sort"  # the run's was bytetrack
    assert set(other["streams"]["lanes"]["lines"]) == {"middle"}


def test_replay_says_what_is_wrong_in_one_line(runs, tmp_path):
    code, output = vidpipe("replay", tmp_path / "nothing")
    assert code == 2 and output.strip().count("\n") == 0, output
    assert "not a folder" in output
    code, output = vidpipe("replay", runs[1], "--line", "middle=1,2,3")
    assert code == 2 and "needs 4 numbers" in output, output
    (tmp_path / "detections.jsonl").write_text('{"stream": "a", "frame": "x"}\n')
    (tmp_path / "summary.json").write_text(json.dumps({"model": "shapes-yolo"}))
    code, output = vidpipe("replay", tmp_path, "--line", LINE)
    assert code == 2 and "line 1: not a detection line" in output, output


def test_run_heatmap_writes_where_the_tracked_objects_were(tmp_path):
    """Issue 36, item 5: ``vidpipe run --heatmap`` (it implies --track): heatmap.png at the
    clip's size, over its first picture."""
    import cv2
    import numpy as np

    from models.tracking_data import make_tracking_clip

    clip = make_tracking_clip(tmp_path / "lanes.mp4", clip=5, frames=60, size=(320, 192))
    code, output = vidpipe("run", clip, "--model", "shapes-yolo", "--out", tmp_path / "out",
                           "--heatmap")
    assert code == 0, output
    png = cv2.imread(str(tmp_path / "out" / "heatmap.png"))
    assert png is not None and png.shape == (192, 320, 3)
    assert "heatmap.png" in output
    lines = [json.loads(x) for x in (tmp_path / "out" / "detections.jsonl").open()]
    assert any(d.get("track_id") is not None for x in lines for d in x["detections"])
    assert not np.all(png == png[0, 0])
