"""Counting lines and zones (issue 18): direction as the docs draw it, hysteresis, fast
objects, the finite segment, id -1, zone inertia and dwell, loitering and overcrowding."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.analytics.config import LineConfig, ZoneConfig, from_flags, parse_line, parse_zone
from pipelines.analytics.lines import LineCounter
from pipelines.analytics.zones import ZoneMonitor, inside_polygon
from pipelines.errors import ConfigError

# A vertical line at x = 100 from (100, 0) down to (100, 200). Walked from its first point to
# its second (downwards on the picture), its right-hand side is x < 100: in = right to left
# of the walker = from x < 100 to x > 100.
DOWN = LineConfig(name="door", points=(100, 0, 100, 200))


def box_at(x: float, y: float = 100.0, size: float = 20.0) -> np.ndarray:
    """A box whose bottom-centre anchor is at (x, y)."""
    return np.array([[x - size / 2, y - size, x + size / 2, y]], np.float32)


def walk(counter: LineCounter, xs, track: int = 7, y: float = 100.0, size: float = 20.0):
    crossings = []
    for x in xs:
        crossings += counter.update(box_at(x, y, size), np.array([track]), np.array([0]))
    return crossings


def test_in_is_the_sign_of_the_documented_formula_going_from_positive_to_negative():
    x1, y1, x2, y2 = DOWN.points
    side = lambda px, py: (x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)  # noqa: E731
    assert side(50, 100) > 0 > side(150, 100)
    counter = LineCounter(DOWN)
    assert [c.direction for c in walk(counter, range(50, 151, 5))] == ["in"]
    assert [c.direction for c in walk(counter, range(150, 49, -5))] == ["out"]
    assert counter.counts == {"in": 1, "out": 1}


def test_every_genuine_crossing_counts_in_out_in():
    counter = LineCounter(DOWN)
    walk(counter, [*range(50, 151, 10), *range(150, 49, -10), *range(50, 151, 10)])
    assert counter.counts == {"in": 2, "out": 1}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=100, max_size=100),
       st.sampled_from([-1.0, 0.0, 1.0]))
def test_a_box_jittering_on_the_line_for_100_frames_counts_at_most_once(jitter, start):
    """The anchor wanders within the hysteresis band (0.1 x the box's 20 px = 2 px) around
    the line, having come from either side or from nowhere."""
    counter = LineCounter(DOWN)
    xs = ([100 + 40 * start] if start else []) + [100 + 2.0 * j for j in jitter]
    walk(counter, xs)
    assert counter.counts["in"] + counter.counts["out"] <= 1
    if not start:
        assert counter.counts == {"in": 0, "out": 0}


def test_a_track_without_an_id_never_counts():
    counter = LineCounter(DOWN)
    walk(counter, range(50, 151, 5), track=-1)
    assert counter.counts == {"in": 0, "out": 0}


@pytest.mark.parametrize("size", [10.0, 40.0])
def test_an_object_moving_three_times_its_size_per_frame_still_counts(size):
    counter = LineCounter(DOWN)
    xs = [100 - 1.5 * 3 * size + 3 * size * k for k in range(4)]  # straddles x = 100
    assert [c.direction for c in walk(counter, xs, size=size)] == ["in"]


def test_passing_beyond_the_end_of_the_line_does_not_count():
    counter = LineCounter(DOWN)
    walk(counter, range(50, 151, 5), y=260.0)  # below the segment's lower end (y = 200)
    assert counter.counts == {"in": 0, "out": 0}
    walk(counter, [150, 50], y=150.0, track=8)  # a jump within the segment does
    assert counter.counts == {"in": 0, "out": 1}


def test_classes_filter_what_a_line_counts():
    counter = LineCounter(DOWN, class_ids={1})
    for x in range(50, 151, 10):
        counter.update(box_at(x), np.array([1]), np.array([0]))
    assert counter.counts == {"in": 0, "out": 0}


SQUARE = ZoneConfig(name="yard", polygon=[(0, 0), (100, 0), (100, 100), (0, 100)],
                    enter_frames=3, exit_frames=5)


def visit(zone: ZoneMonitor, inside: list[bool | None], start: float = 0.0,
          step: float = 0.1, track: int = 3):
    """Frames at ``step`` s: True anchor inside, False outside, None the track unseen."""
    events = []
    for k, where in enumerate(inside):
        if where is None:
            xyxy, ids = np.zeros((0, 4), np.float32), np.zeros(0, np.int32)
        else:
            xyxy, ids = box_at(50 if where else 150, 50), np.array([track])
        events += zone.update(start + k * step, xyxy, ids, np.zeros(len(ids), np.int32))
    return events


def test_point_in_polygon():
    points = np.array([[50, 50], [150, 50], [0.5, 99.5], [-1, 50]], np.float64)
    assert inside_polygon(points, np.array(SQUARE.polygon, np.float64)).tolist() == [
        True, False, True, False]


def test_entry_and_exit_need_their_inertia():
    zone = ZoneMonitor(SQUARE)
    assert visit(zone, [True, True, False, True, True]) == []  # two in a row: not in yet
    events = visit(zone, [True, True, True])
    assert [e["type"] for e in events] == ["zone_enter"] and zone.occupancy == 1
    assert visit(zone, [False] * 4) == [] and zone.occupancy == 1  # four out: still in
    exit_ = visit(zone, [False])
    assert [e["type"] for e in exit_] == ["zone_exit"] and zone.occupancy == 0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4))
def test_a_track_lost_for_fewer_frames_than_the_exit_inertia_keeps_its_dwell(lost):
    zone = ZoneMonitor(SQUARE)
    events = visit(zone, [True] * 10 + [None] * lost + [True] * 10 + [False] * 5)
    kinds = [e["type"] for e in events]
    assert kinds == ["zone_enter", "zone_exit"], kinds
    # the visit ran from the first inside frame to the last one, the loss included
    assert events[1]["dwell_s"] == pytest.approx((20 + lost - 1) * 0.1)


def test_a_longer_loss_ends_the_visit():
    zone = ZoneMonitor(SQUARE)
    kinds = [e["type"] for e in visit(zone, [True] * 5 + [None] * 5 + [True] * 5)]
    assert kinds == ["zone_enter", "zone_exit", "zone_enter"]


def test_loitering_is_said_once_per_visit():
    zone = ZoneMonitor(SQUARE.model_copy(update={"loiter_s": 1.0}))
    kinds = [e["type"] for e in visit(zone, [True] * 30)]
    assert kinds == ["zone_enter", "loiter"] and zone.loitering == 1


def test_overcrowding_has_a_begin_and_an_end():
    zone = ZoneMonitor(SQUARE.model_copy(update={"crowd": 2, "crowd_s": 0.5,
                                                  "enter_frames": 1, "exit_frames": 1}))
    kinds = []
    for k in range(20):
        ids = np.array([1, 2]) if k < 12 else np.array([1])
        xyxy = np.concatenate([box_at(50, 50)] * len(ids))
        kinds += [e["type"] for e in zone.update(k * 0.1, xyxy, ids, np.zeros(len(ids), int))]
    assert kinds == ["zone_enter", "zone_enter", "crowd_begin", "zone_exit", "crowd_end"]


def test_flags_parse_or_say_what_is_wrong():
    assert parse_line("door=1,2,3,4").points == (1, 2, 3, 4)
    assert parse_zone("z=0,0,10,0,10,10").polygon == [(0, 0), (10, 0), (10, 10)]
    for bad, words in (("door=1,2,3", "needs 4 numbers"), ("door", "expected NAME="),
                       ("door=1,2,1,2", "the same"), ("a b=1,2,3,4", "expected NAME="),
                       ("d=1,x,3,4", "must be numbers")):
        with pytest.raises(ConfigError, match=words):
            parse_line(bad)
    with pytest.raises(ConfigError, match="at least 6"):
        parse_zone("z=0,0,1,1")
    assert from_flags(None, [], [], 1) is None
    implied = from_flags(None, ["door=1,2,3,4"], [], 1)
    assert implied is not None and implied.track is not None
    assert implied.track.kind == "botsort"
    with pytest.raises(ConfigError, match="unique"):
        from_flags("sort", ["a=1,2,3,4"], ["a=0,0,1,0,1,1"])
    with pytest.raises(ConfigError, match="expected one of"):
        from_flags("deepsort", [], [])


def test_a_zones_counts_at_a_time_hold_each_visits_dwell_so_far():
    zone = ZoneMonitor(SQUARE)
    visit(zone, [True] * 10)
    assert zone.counts(0.9)["dwell_s"] == {"3": pytest.approx(0.9)}
    assert "dwell_s" not in zone.counts()


def test_each_ended_visits_dwell_is_kept_summarised_and_measured():
    """Issue 36, item 5: per-zone dwell as data — the summary's figures and Prometheus'
    vidpipe_zone_dwell_seconds histogram, from the ended visits."""
    from models.zoo import resolve_model
    from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
    from pipelines.analytics.stream import StreamAnalytics
    from pipelines.frame import Detections, Frame, Result
    from pipelines.metrics import PipelineMetrics

    zone = ZoneMonitor(SQUARE)
    assert zone.dwell_summary() == {"visits": 0}
    visit(zone, [True] * 11 + [False] * 5)  # 1.0 s inside at 10 frames a second
    visit(zone, [True] * 31 + [False] * 5)  # 3.0 s
    assert zone.dwells == pytest.approx([1.0, 3.0])
    assert zone.dwell_summary() == {"visits": 2, "mean_s": 2.0, "p50_s": 2.0, "p90_s": 2.8,
                                    "max_s": 3.0}
    metrics = PipelineMetrics()
    _, spec = resolve_model("shapes-yolo")
    config = AnalyticsConfig(track=TrackerSettings(), zones=[SQUARE])
    analytics = StreamAnalytics("cam", config, spec, 10.0, metrics)
    for k in range(40):  # 2 s in the square, then gone; frames at 10 a second
        x = 50.0 if k < 20 else 300.0 + 20 * k
        result = Result(Frame("cam", k, k / 10, 0.0, None),
                        Detections(box_at(x, 50), np.array([0.9]), np.array([0])))
        analytics.process(result)
    sample = metrics.registry.get_sample_value
    labels = {"stream": "cam", "zone": "yard"}
    assert sample("vidpipe_zone_dwell_seconds_count", labels) == 1
    assert analytics.zones[0].dwells[0] > 1.5  # its track confirmed at the second frame
    assert sample("vidpipe_zone_dwell_seconds_sum", labels) == pytest.approx(
        analytics.zones[0].dwells[0])
