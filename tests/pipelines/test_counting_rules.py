"""Issue 36, item 2: counting rules against the tracker's mistakes, each on the case it is
for — an object stopped on the line, two tracks on one object, an identity switch between
neighbours, a track lost on the line and born again across it, a box that settles late."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.analytics.config import LineConfig, TrackerSettings
from pipelines.analytics.fast import FIRST_ID
from pipelines.analytics.lines import LineCounter
from pipelines.analytics.tracking import StreamTracker
from pipelines.frame import Detections
from tests.pipelines.test_lines_zones import DOWN, box_at, walk


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=150, max_size=150), st.sampled_from([-1, 1]),
       st.floats(-1.5, 1.5))
def test_an_object_stopped_on_the_line_for_5_s_counts_once(jitter, way, offset):
    """It comes from one side, stands 5 s (150 frames at 30 fps) on the line with its box
    jittering within the band (0.1 x 20 px = 2 px), then goes on through: one crossing,
    in its direction."""
    counter = LineCounter(DOWN)
    come = [100 - way * x for x in range(60, 0, -4)]
    stand = [100 + offset + 0.5 * j for j in jitter]
    go = [100 + way * x for x in range(4, 64, 4)]
    walk(counter, come + stand + go)
    assert counter.counts == ({"in": 1, "out": 0} if way > 0 else {"in": 0, "out": 1})


def _two_objects(counter: LineCounter, swap_at: int) -> None:
    """Two objects side by side, 40 px apart (twice their height), moving along the line
    without crossing it; their ids swap at frame ``swap_at``."""
    for k in range(60):
        x = 40.0 + k
        a, b = (1, 2) if k < swap_at else (2, 1)
        boxes = np.concatenate([box_at(x, 60), box_at(x, 100)])
        counter.update(boxes, np.array([a, b]), np.array([0, 0]))


def test_an_identity_switch_between_neighbours_counts_nothing_with_max_jump():
    line = LineConfig(name="across", points=(0, 80, 200, 80))  # between the two objects
    plain, guarded = LineCounter(line), LineCounter(line.model_copy(update={"max_jump": 0.8}))
    _two_objects(plain, 30)
    _two_objects(guarded, 30)
    assert plain.counts == {"in": 1, "out": 1}  # each id's anchor jumped across the line
    assert guarded.counts == {"in": 0, "out": 0}


def test_a_fast_object_still_counts_with_max_jump():
    guarded = LineCounter(DOWN.model_copy(update={"max_jump": 0.8}))
    walk(guarded, range(-20, 240, 60))  # three times its 20 px a frame, steadily
    assert guarded.counts == {"in": 1, "out": 0}


def test_a_track_lost_on_the_line_and_born_across_it_counts_with_relink():
    """Track 1 comes from the left and is lost just short of the line; track 2 is born just
    past it 5 frames later and goes on."""
    def run(config):
        counter = LineCounter(config)
        walk(counter, range(40, 96, 4), track=1)
        for _ in range(5):
            counter.update(np.zeros((0, 4), np.float32), np.zeros(0, int), np.zeros(0, int))
        walk(counter, range(104, 160, 4), track=2)
        return counter.counts
    # without relinking, track 2 was never on the other side
    assert run(DOWN.model_copy(update={"relink_frames": 0})) == {"in": 0, "out": 0}
    assert run(DOWN) == {"in": 1, "out": 0}  # relink_frames 30, the default


def test_relink_never_takes_a_track_that_is_still_in_view():
    """Track 1 stands left of the line; track 2 appears right of it beside track 1 and is
    listed first: it is another object, not track 1 reborn."""
    counter = LineCounter(DOWN.model_copy(update={"relink_frames": 30}))
    for _ in range(5):
        counter.update(box_at(90), np.array([1]), np.array([0]))
    for _ in range(5):
        both = np.concatenate([box_at(108), box_at(90)])
        counter.update(both, np.array([2, 1]), np.array([0, 0]))
    assert counter.counts == {"in": 0, "out": 0}


def test_settle_frames_need_that_many_observations_beyond_the_band():
    # jumps of 60 px are what the jitter band is for: held off to see settle_frames alone
    counter = LineCounter(DOWN.model_copy(update={"settle_frames": 3, "jitter_band": 0.0}))
    walk(counter, [50, 60, 120, 121, 60, 61, 62])  # two frames across, then back: no count
    assert counter.counts == {"in": 0, "out": 0}
    walk(counter, [120, 121, 122])
    assert counter.counts == {"in": 1, "out": 0}


def test_once_per_track_counts_each_direction_once():
    # a box leaping 100 px back and forth each frame is a wobble to the jitter band: held
    # off to see once_per_track alone
    counter = LineCounter(DOWN.model_copy(update={"once_per_track": True, "jitter_band": 0.0}))
    walk(counter, [50, 150, 50, 150, 50])
    assert counter.counts == {"in": 1, "out": 1}


@pytest.mark.parametrize("duplicate_iou, tracks", [(0.0, 2), (0.6, 1)])
def test_two_classes_on_one_object_make_one_track_with_duplicate_iou(duplicate_iou, tracks):
    """The model names one object twice (a disc and a box, per-class NMS keeps both): with
    ``duplicate_iou`` only the higher-scoring box is tracked, the other has no id."""
    tracker = StreamTracker(TrackerSettings(duplicate_iou=duplicate_iou), 0.25, 30.0)
    for k in range(10):
        x = 50.0 + 3 * k
        boxes = np.array([[x, 50, x + 40, 90], [x + 1, 51, x + 41, 92]], np.float32)
        out = tracker.update(Detections(boxes, np.array([0.9, 0.6]), np.array([0, 1])),
                             k / 30)
    assert len(set(out.track_id.tolist()) - {-1}) == tracks
    assert out.track_id[0] >= 0  # the higher-scoring box is the one tracked


def test_relink_follows_the_lost_track_s_motion():
    """Track 1 walks at 4 px a frame towards the line and is lost 8 px short of it; 11
    frames on, track 2 is born where that motion has taken it, 44 px on (two box heights
    from where track 1 was last seen): the same object, counted once."""
    counter = LineCounter(DOWN.model_copy(update={"relink_frames": 30}))
    walk(counter, range(40, 96, 4), track=1)
    for _ in range(10):
        counter.update(np.zeros((0, 4), np.float32), np.zeros(0, int), np.zeros(0, int))
    walk(counter, range(136, 180, 4), track=2)
    assert counter.counts == {"in": 1, "out": 0}


def _fast_pass(settings: TrackerSettings, step: float) -> dict[str, int]:
    """A 40 px object crossing a vertical line at x = 320, ``step`` px a frame, through
    the tracker and the line as the analytics stage gives them."""
    tracker = StreamTracker(settings, 0.25, 30.0)
    counter = LineCounter(LineConfig(name="middle", points=(320, 0, 320, 384)))
    for k, x in enumerate(np.arange(20.0, 620.0, step)):
        boxes = np.array([[x, 100, x + 40, 140]], np.float32)
        out = tracker.update(Detections(boxes, np.array([0.9]), np.array([0])), k / 30)
        counter.update(out.xyxy, out.track_id, out.class_id, tracker.confirmed)
    return counter.counts


@pytest.mark.parametrize("step", [30.0, 80.0, 120.0])
def test_an_object_faster_than_its_size_a_frame_is_tracked_and_counted(step):
    """From 0.75 to 3 sizes a frame: no box overlaps the one before, so the tracker never
    confirms it; the fast-object chains do, and the line judges the path it took before
    its id (the crossing may come before the third box)."""
    assert _fast_pass(TrackerSettings(), step) == {"in": 1, "out": 0}
    assert _fast_pass(TrackerSettings(fast_objects=False), step) == {"in": 0, "out": 0}


@pytest.mark.parametrize("seed", range(5))
def test_a_false_box_flickering_at_random_makes_no_fast_track(seed):
    """One box a frame in a random place for 10 s (a detector's flicker): no three in a row
    line up at one speed, so none gets a fast-object id. (Denser clutter can: three random
    boxes a frame made 7 chains in 1,500 frames, docs/BENCHMARKS.md.)"""
    rng = np.random.default_rng(seed)
    tracker = StreamTracker(TrackerSettings(), 0.25, 30.0)
    for k in range(300):
        xy = rng.uniform(0, 600, (1, 2))
        boxes = np.concatenate([xy, xy + 40], axis=1).astype(np.float32)
        out = tracker.update(Detections(boxes, np.full(1, 0.9), np.zeros(1, int)), k / 30)
        assert (out.track_id < FIRST_ID).all()


def _on_the_line_wobbling(wobble: float, seed: int) -> list[float]:
    """An object coming from the left onto the line (x = 100), on it for 5 s with its box
    wobbling up to ``wobble`` px either side (a turning shape's box, a detector's box now
    of the whole object, now of a part), then going on to the right."""
    rng = np.random.default_rng(seed)
    return [*range(40, 100, 4), *(100 + rng.uniform(-wobble, wobble, 150)), *range(104, 204, 4)]


@pytest.mark.parametrize("seed", range(5))
def test_a_box_wobbling_across_the_line_it_stands_on_counts_once(seed):
    """The wobble (6 px) is three times the hysteresis band (0.1 x 20 px): with the band
    held to the hysteresis each wobble across is a crossing; widened to twice the track's
    own jitter, only the object's passage counts."""
    xs = _on_the_line_wobbling(6.0, seed)
    counter = LineCounter(DOWN)
    walk(counter, xs)
    assert counter.counts == {"in": 1, "out": 0}
    plain = LineCounter(DOWN.model_copy(update={"jitter_band": 0.0}))
    walk(plain, xs)
    assert sum(plain.counts.values()) >= 9
