"""The pts results carry: never null, never back, continued across reconnects by the time a
camera was away (a gap, counted)."""

import pytest

from pipelines.decode.timeline import StreamTimeline

STEP = 1 / 30


def feed(timeline, frames):
    return [timeline.at(pts, epoch, captured) for pts, epoch, captured in frames]


def test_a_file_keeps_its_own_pts():
    got = feed(StreamTimeline(30), [(0.0, 0, 10.0), (STEP, 0, 10.1), (2 * STEP, 0, 10.2)])
    assert [pts for pts, _ in got] == pytest.approx([0.0, STEP, 2 * STEP])
    assert all(gap is None for _, gap in got)


def test_a_null_first_pts_is_zero_and_the_next_ones_follow():
    got = feed(StreamTimeline(30), [(None, 1, 5.0), (0.0333, 1, 5.03), (0.0667, 1, 5.07)])
    assert [pts for pts, _ in got] == pytest.approx([0.0, STEP, STEP + 0.0334])


def test_a_looped_file_goes_on_instead_of_going_back():
    got = feed(StreamTimeline(30), [(0.0, 0, 1.0), (STEP, 0, 1.03), (0.0, 0, 1.07),
                                    (STEP, 0, 1.1)])
    pts = [p for p, _ in got]
    assert pts == pytest.approx([0.0, STEP, 2 * STEP, 3 * STEP])
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False))


def test_a_reconnect_continues_the_pts_by_the_time_away_and_counts_a_gap():
    timeline = StreamTimeline(30)
    first = feed(timeline, [(None, 1, 100.0), (0.0333, 1, 100.033), (0.0667, 1, 100.067)])
    # the camera comes back 12 s later on a new connection, its pts from null and 0 again
    second = feed(timeline, [(None, 2, 112.067), (0.0333, 2, 112.1), (0.0667, 2, 112.133)])
    pts = [p for p, _ in first + second]
    assert all(b > a for a, b in zip(pts, pts[1:], strict=False))
    assert pts[3] == pytest.approx(pts[2] + 12.0)  # 12 s away on the stream's timeline
    gaps = [g for _, g in first + second if g is not None]
    assert gaps == [pytest.approx(12.0 - STEP)]


def test_a_new_connection_with_large_pts_is_rebased_not_jumped():
    timeline = StreamTimeline(30)
    feed(timeline, [(0.0, 1, 0.0), (STEP, 1, STEP)])
    (pts, gap), (after, _) = feed(timeline, [(None, 2, 3.0), (5000.0, 2, 3.03)])
    assert gap == pytest.approx(3.0 - 2 * STEP)
    assert after == pytest.approx(pts + STEP)  # not 5000 s later
