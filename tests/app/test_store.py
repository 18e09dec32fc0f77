"""The service's store (SQLite): streams remembered as they run, with their origin; events
indexed, filtered and paged; the file private to its user."""

import stat
import time

import pytest

from app.service.config import AnalyticsUpdate, StreamConfig
from app.service.remembered import RememberedStreams
from app.service.store import EventQuery, ServiceStore, cursor, parse_cursor


def event(n: int, at: float, **fields) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"
    return {"id": f"{n:032x}", "stream": "cam", "type": "line_cross", "time": stamp,
            "class": "person", "line": "door", **fields}


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    store = ServiceStore(tmp_path / "state" / "vidpipe.db" if request.param == "file" else None)
    yield store
    store.close()


def test_the_database_is_private_to_its_user(tmp_path):
    ServiceStore.for_state_dir(tmp_path / "state").close()
    mode = (tmp_path / "state" / "vidpipe.db").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600  # it holds camera URLs with their passwords


def test_streams_are_remembered_as_they_run_and_survive_a_reopen(tmp_path):
    path = tmp_path / "vidpipe.db"
    store = ServiceStore(path)
    cam = StreamConfig(url="rtsp://u:pw@cam/1", id="door", lines=[
        {"name": "in", "points": [0, 10, 100, 10]}])
    store.save_stream(cam, "api", 1.0)
    store.save_stream(StreamConfig(url="/media/a.mp4", id="yard"), "config", 2.0)
    store.save_stream(cam.model_copy(update={"lines": []}), "api", 3.0)  # changed later
    store.close()
    again = ServiceStore(path)
    found = again.streams()
    assert [(c.id, origin) for c, origin in found] == [("door", "api"), ("yard", "config")]
    assert found[0][0].url == "rtsp://u:pw@cam/1" and found[0][0].lines == []
    again.forget_stream("door")
    assert [c.id for c, _ in again.streams()] == ["yard"]
    again.close()


def test_events_are_filtered_and_paged_newest_first(store):
    base = 1_800_000_000.0
    for n in range(10):
        store.add_event(event(n, base + n, line="door" if n % 2 else "gate",
                              **({"class": "car"} if n == 9 else {})))
    store.add_event(event(3, base + 3, line="gate"))  # sent again: replaced, not doubled
    assert store.count_events() == 10
    rows = store.events(EventQuery(limit=3))
    assert [e["id"] for _, _, e in rows] == [f"{n:032x}" for n in (9, 8, 7)]
    page2 = store.events(EventQuery(limit=3, before=parse_cursor(cursor(*rows[-1][:2]))))
    assert [e["id"][-1] for _, _, e in page2] == ["6", "5", "4"]
    doors = store.events(EventQuery(limit=50, line="door"))
    assert [e["id"][-1] for _, _, e in doors] == ["9", "7", "5", "1"]  # 3 is a gate now
    assert len(store.events(EventQuery(label="car"))) == 1
    window = store.events(EventQuery(since=base + 2, until=base + 5))
    assert [e["id"][-1] for _, _, e in window] == ["4", "3", "2"]
    assert store.events(EventQuery(types=("end",))) == []


def test_events_are_pruned_by_age_then_by_count(store):
    base = 1_800_000_000.0
    for n in range(10):
        store.add_event(event(n, base + n))
    assert store.prune_events(base + 4, keep=3) == 4 + 3
    assert [e["id"][-1] for _, _, e in store.events(EventQuery())] == ["9", "8", "7"]


def test_the_rule_of_precedence_between_the_config_and_what_was_remembered(store):
    remembered = RememberedStreams(store)
    remembered.added(StreamConfig(url="/m/a.mp4", id="api-cam"))
    remembered.added(StreamConfig(url="/m/b.mp4", id="taken"))
    store.save_stream(StreamConfig(url="/m/c.mp4", id="declared", lines=[
        {"name": "in", "points": [0, 1, 2, 1]}]), "config", time.time())
    plan = remembered.restore(running=["declared", "taken"])
    assert [c.id for c in plan.additions] == ["api-cam"]  # "taken": the config's now
    assert [(sid, [line.name for line in u.lines]) for sid, u in plan.changes] == \
        [("declared", ["in"])]
    assert store.stream("taken") is None
    # a change to a declared stream is remembered as the config's, one to an added one as its
    remembered.changed(AnalyticsUpdate(lines=[]).applied_to(StreamConfig(url="/m/c.mp4",
                                                                        id="declared")))
    remembered.changed(StreamConfig(url="/m/a.mp4", id="api-cam", track="bytetrack"))
    assert store.stream("declared")[1] == "config" and store.stream("api-cam")[1] == "api"


def test_a_remembered_tracker_keeps_what_was_said_and_leaves_the_rest_to_the_card(store):
    """Issue 36, item 3: settings the user gave (even at their default value) survive a
    restart as given; those not given stay unsaid, for the model card's fitted ones."""
    from pipelines.analytics.config import TrackerSettings
    from pipelines.analytics.tracking import fitted

    cfg = StreamConfig(url="rtsp://10.0.0.5/cam", id="door",
                       track=TrackerSettings(kind="bytetrack", lost_frames=30))
    store.save_stream(cfg, "api", time.time())
    loaded, _ = store.stream("door")
    card = {"lost_frames": 90, "min_iou": 0.3}
    track = fitted(loaded.track, card)
    assert (track.lost_frames, track.min_iou) == (30, 0.3)
