"""A run's events (issue 19): every event in the published schema, objects with their
snapshots and clips, and the flags that ask for them."""

import json
from datetime import datetime
from pathlib import Path

import av
import jsonschema
import pytest

from app.outputs.config import EventsConfig
from app.run.runner import run_files
from models.tracking_data import make_tracking_clip
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings, ZoneConfig
from pipelines.events.config import ClipSettings, ObjectSettings
from pipelines.options import PipelineOptions
from tests.app.test_cli import read_jsonl, vidpipe

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "events.schema.json").read_text())


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    return make_tracking_clip(tmp_path_factory.mktemp("lanes") / "lanes.mp4", clip=3,
                              frames=90, size=(320, 192))


@pytest.fixture(scope="module")
def run(lanes, tmp_path_factory):
    """The clip with a line and a zone that says every kind of zone event, snapshots and
    clips (1 s before and after)."""
    out = tmp_path_factory.mktemp("run")
    path, spec = resolve_model("shapes-yolo")
    zone = ZoneConfig(name="left", polygon=[(0, 0), (160, 0), (160, 192), (0, 192)],
                      loiter_s=0.5, crowd=1, crowd_s=0.2, exit_frames=5)
    analytics = AnalyticsConfig(track=TrackerSettings(), zones=[zone],
                                lines=[LineConfig(name="middle", points=(160, 0, 160, 192))])
    events = EventsConfig(objects=ObjectSettings(update_s=0.5), snapshots=True,
                          clips=ClipSettings(pre_s=1.0, post_s=1.0))
    _, _, outputs = run_files([lanes], path, spec, out, PipelineOptions(analytics=analytics),
                              events=events)
    return out, outputs


def test_every_event_validates_against_the_published_schema(run):
    out, outputs = run
    events = read_jsonl(outputs.events)
    validator = jsonschema.Draft202012Validator(SCHEMA,
                                                format_checker=jsonschema.FormatChecker())
    for event in events:
        validator.validate(event)
        assert datetime.fromisoformat(event["time"]).tzinfo is not None  # UTC, with its Z
    kinds = {e["type"] for e in events}
    assert kinds >= {"new", "update", "end", "line_cross", "zone_enter", "zone_exit",
                     "loiter", "crowd_begin"}, kinds
    assert len({e["id"] for e in events}) == len(events)  # ids are unique
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"]["file"]["sent"] == len(events)


def test_each_object_is_new_once_and_ends_once_with_its_media(run):
    out, outputs = run
    events = read_jsonl(outputs.events)
    new = [e["object"] for e in events if e["type"] == "new"]
    ended = [e for e in events if e["type"] == "end"]
    assert sorted(new) == sorted(e["object"] for e in ended) and len(set(new)) == len(new)
    for end in ended:
        assert (out / end["snapshot"]).is_file() and (out / end["snapshot_clean"]).is_file()
        clip = out / end["clip"]
        with av.open(str(clip)) as container:
            frames = sum(1 for _ in container.decode(video=0))
        assert frames > 0
        # from a key frame at or before 1 s before the object appeared (this clip has its
        # only key frame at 0), to 1 s after it was last seen, or the clip's end
        assert end["clip_start_pts"] <= max(0.0, end["first_pts"] - 1.0) + 1e-6
    for e in events:
        if e["type"] in ("line_cross", "zone_enter"):
            assert e["object"] in new


def test_the_flags_ask_for_snapshots_and_clips_and_need_a_tracker(lanes, tmp_path):
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--out", tmp_path / "a",
                           "--clips")
    assert code == 2 and "add --track" in output
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--out", tmp_path / "b",
                           "--track", "bytetrack", "--snapshots", "--clips")
    assert code == 0, output
    ends = [e for e in read_jsonl(tmp_path / "b" / "events.jsonl") if e["type"] == "end"]
    assert ends and all(e["clip"] and e["snapshot"] for e in ends)
    assert len(list((tmp_path / "b" / "events" / "lanes").glob("*.mp4"))) == len(ends)
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--out", tmp_path / "c",
                           "--track", "bytetrack", "--events-mqtt", "http://broker/x")
    assert code == 2 and "mqtt://" in output
    code, output = vidpipe("run", lanes, "--model", "shapes-yolo", "--out", tmp_path / "d",
                           "--track", "bytetrack", "--events-webhook", "http://127.0.0.1:9/x")
    assert code == 2 and "VIDPIPE_WEBHOOK_SECRET" in output
    assert not (tmp_path / "d").exists()
