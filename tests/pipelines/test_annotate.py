"""What --annotate draws (issue 34, item 5): each box with its label, its track id where the
stream is tracked, and its score; the stream's lines and zones with their counts."""

import numpy as np

from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings, ZoneConfig
from pipelines.frame import Detections
from pipelines.sinks.video import _LINE, _ZONE, draw_analytics, draw_detections
from tests.support.fakes import FAKE_SPEC


def boxes(track_id: int) -> Detections:
    return Detections(np.array([[40, 40, 120, 120]], np.float32), np.array([0.9], np.float32),
                      np.array([0]), np.array([track_id]))


def near(pixels: np.ndarray, colour: tuple[int, int, int]) -> bool:
    """Whether one of ``pixels`` is ``colour``, within what anti-aliasing takes off."""
    return bool((np.abs(pixels.astype(int) - colour).max(axis=1) <= 30).any())


def test_a_tracked_box_carries_its_track_id():
    black = np.zeros((240, 320, 3), np.uint8)
    untracked = draw_detections(black, boxes(-1), FAKE_SPEC)
    tracked = draw_detections(black, boxes(7), FAKE_SPEC)
    label = (slice(20, 40), slice(40, 200))  # the text above the box
    assert (tracked[label] != untracked[label]).any()  # " #7" written
    assert (untracked[41:119, 40] == untracked[41:119, 40][0]).all()  # the same box


def test_lines_and_zones_are_drawn_with_their_counts():
    config = AnalyticsConfig(track=TrackerSettings(), lines=[LineConfig(
        name="door", points=(0, 200, 320, 200))], zones=[ZoneConfig(
            name="yard", polygon=[(20, 20), (140, 20), (140, 100), (20, 100)])])
    counts = {"lines": {"door": {"in": 3, "out": 1}},
              "zones": {"yard": {"occupancy": 2, "entered": 5, "exited": 3}}}
    image = draw_analytics(np.zeros((240, 320, 3), np.uint8), config, counts)
    assert near(image[197:204, 250], _LINE)  # the line, away from its text
    assert near(image[60, 137:144], _ZONE)  # the zone's right edge (anti-aliased)
    no_counts = draw_analytics(np.zeros((240, 320, 3), np.uint8), config, None)
    assert (image != no_counts).any()  # "in 3 out 1", "2 in" against "in 0 out 0", "0 in"
