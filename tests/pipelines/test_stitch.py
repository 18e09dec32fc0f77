"""Stitching (issue 36): an object the tracker lost behind something and found again as a new
track keeps its id; other objects, other classes and tracks lost too long ago do not take it,
and no two tracks on one frame share an id."""

import numpy as np

from pipelines.analytics.config import LineConfig, TrackerSettings
from pipelines.analytics.lines import LineCounter
from pipelines.analytics.stitch import FIRST_ID, Stitcher
from pipelines.analytics.tracking import StreamTracker
from pipelines.frame import Detections

SIZE = 40.0


def box(x: float, y: float = 100.0) -> list[float]:
    return [x, y, x + SIZE, y + SIZE]


def frame(stitcher: Stitcher, k: int, rows: list[tuple[int, list[float], int]]) -> list[int]:
    """Tracker ids, boxes and classes of frame ``k`` (30 fps) through ``stitcher``."""
    ids = np.array([r[0] for r in rows], np.int64)
    xyxy = np.array([r[1] for r in rows], np.float32).reshape(-1, 4)
    classes = np.array([r[2] for r in rows], np.int64)
    return stitcher.rename(ids, xyxy, classes, k / 30).tolist()


def walk(stitcher: Stitcher, hidden: range, then: tuple[int, float, int]) -> list[int]:
    """Tracker id 1 moving right 5 px a frame for 10 frames, hidden on ``hidden``, and then
    ``then`` (tracker id, x offset from where its motion took it, class) for 5 frames."""
    names = []
    for k in range(10):
        names += frame(stitcher, k, [(1, box(5 * k), 0)])
    new_id, offset, cls = then
    for k in range(hidden.stop, hidden.stop + 5):
        names += frame(stitcher, k, [(new_id, box(5 * k + offset), cls)])
    return names


def test_a_track_found_again_where_its_motion_took_it_keeps_its_id():
    names = walk(Stitcher(window_s=2.0), range(10, 40), (7, 10.0, 0))
    assert set(names) == {1}


def test_a_track_far_from_it_of_another_class_or_too_late_gets_its_own():
    assert set(walk(Stitcher(2.0), range(10, 40), (7, 3 * SIZE, 0))) == {1, 7}
    assert set(walk(Stitcher(2.0), range(10, 40), (7, 0.0, 1))) == {1, 7}
    assert set(walk(Stitcher(0.5), range(10, 40), (7, 0.0, 0))) == {1, 7}


def test_a_box_of_another_size_is_not_the_lost_object():
    stitcher = Stitcher(2.0)
    for k in range(10):
        frame(stitcher, k, [(1, box(5 * k), 0)])
    x = 5 * 20
    assert frame(stitcher, 20, [(7, [x, 100, x + 3 * SIZE, 100 + 3 * SIZE], 0)]) == [7]


def test_two_tracks_on_one_frame_never_share_an_id():
    """The tracker's own lost track comes back while the one stitched to its id lives: the
    one last seen under the id keeps it, the other gets a name of its own."""
    stitcher = Stitcher(2.0)
    for k in range(10):
        frame(stitcher, k, [(1, box(5 * k), 0)])
    assert frame(stitcher, 12, [(7, box(60), 0)]) == [1]
    both = frame(stitcher, 13, [(1, box(65, 300), 0), (7, box(65), 0)])
    assert both[1] == 1 and both[0] >= FIRST_ID
    assert frame(stitcher, 14, [(1, box(70, 300), 0), (7, box(70), 0)]) == both


def test_the_nearest_pairs_are_stitched_first():
    stitcher = Stitcher(2.0)
    for k in range(10):
        frame(stitcher, k, [(1, box(5 * k), 0), (2, box(5 * k + 200), 0)])
    # both lost; two new tracks where each one's motion took it, given in the other order
    assert frame(stitcher, 20, [(8, box(300), 0), (9, box(100), 0)]) == [2, 1]


def test_an_object_crossing_hidden_keeps_its_track_and_is_counted():
    """Through the tracker: a box moving right across a line, hidden for 40 frames around
    it (no box: longer than the tracker keeps a lost track), comes out as the same track;
    with stitching off, as a new one, and the crossing is lost."""
    def run(settings: TrackerSettings) -> tuple[set[int], dict[str, int]]:
        tracker = StreamTracker(settings, 0.25, 30)
        line = LineCounter(LineConfig(name="l", points=(240, 0, 240, 400), relink_frames=0))
        ids: set[int] = set()
        for k in range(70):
            if 15 <= k < 55:
                continue
            d = Detections(np.array([box(6 * k + 20)], np.float32), np.array([0.9]),
                           np.array([0]))
            tracked = tracker.update(d, k / 30)
            ids |= {t for t in tracked.track_id.tolist() if t >= 0}
            line.update(tracked.xyxy, tracked.track_id, tracked.class_id)
        return ids, line.counts

    ids, counts = run(TrackerSettings())
    assert len(ids) == 1 and counts == {"in": 1, "out": 0}
    ids, counts = run(TrackerSettings(stitch_frames=0))
    assert len(ids) == 2 and counts == {"in": 0, "out": 0}
