"""Issue 36, item 3: the tracker fitted to a model — ``vidpipe model tune-tracker`` searches
its settings on a labelled clip and writes them to the card, which a stream's tracker then
takes where its own settings say nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from app.recipes.tune_tracker import write_card
from pipelines.analytics.config import TrackerSettings
from pipelines.analytics.tracking import fitted
from pipelines.errors import ConfigError
from tests.support.cli import vidpipe_model


def test_the_cards_settings_fill_what_the_stream_leaves_unsaid():
    card = {"lost_frames": 20, "min_iou": 0.3}
    assert fitted(TrackerSettings(), card).lost_frames == 20
    mine = fitted(TrackerSettings(kind="ocsort", lost_frames=45), card)
    assert (mine.kind, mine.lost_frames, mine.min_iou) == ("ocsort", 45, 0.3)
    assert fitted(TrackerSettings(), {}) == TrackerSettings()
    with pytest.raises(ConfigError, match="tracker settings"):
        fitted(TrackerSettings(), {"lost_frames": -1})


def test_writing_the_card_replaces_its_tracker_block_and_keeps_the_rest(tmp_path):
    card = tmp_path / "card.yaml"
    card.write_text("# a comment\nname: m\ntracker:  # old\n  lost_frames: 5\nclasses: [a]\n")
    write_card(card, {"lost_frames": 20, "min_iou": 0.3}, "new")
    assert card.read_text() == ("# a comment\nname: m\nclasses: [a]\ntracker:  # new\n"
                                "  lost_frames: 20\n  min_iou: 0.3\n")


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    from models.tracking_data import make_tracking_clip

    folder = tmp_path_factory.mktemp("tune")
    return make_tracking_clip(folder / "lanes.mp4", clip=6, frames=90, size=(640, 384),
                              occluded=True)


def test_tune_tracker_searches_prints_and_writes_the_card(lanes, tmp_path):
    model = tmp_path / "shapes"
    model.mkdir()
    for name in ("model.onnx", "card.yaml"):
        shutil.copy(f"models/zoo/shapes-yolo/{name}", model / name)
    code, output = vidpipe_model("tune-tracker", model, "--video", lanes, "--dry-run",
                                 "--out", tmp_path / "dry")
    assert code == 0, output
    report = json.loads((tmp_path / "dry" / "tune.json").read_text())
    assert report["evaluations"] >= 20
    assert set(report["settings"]) == set(TrackerSettings.model_fields)
    assert {k: report["settings"][k] for k in report["changed"]} == report["changed"]
    assert "before" in output and "after" in output
    assert "tracker:" not in (model / "card.yaml").read_text()  # a dry run writes nothing
    code, output = vidpipe_model("tune-tracker", model, "--video", lanes, "--out",
                                 tmp_path / "wet")
    assert code == 0, output
    from models.zoo import resolve_model

    _, spec = resolve_model(str(model))
    assert spec.tracker == report["changed"]  # the same search, the same answer
    if report["changed"]:
        assert "wrote the tracker settings to" in output
        assert fitted(TrackerSettings(), spec.tracker).model_dump() == report["settings"]
    else:
        assert "nothing to write" in output and "tracker:" not in (model / "card.yaml").read_text()


def test_tune_tracker_says_what_is_missing_in_one_line(lanes, tmp_path):
    code, output = vidpipe_model("tune-tracker", "shapes-yolo", "--video", lanes, "--truth",
                                 tmp_path / "none.txt", "--dry-run", "--out", tmp_path / "o")
    assert code == 2 and "no such file" in output and output.strip().count("\n") == 0, output
