"""Issue 35, item 5: the capacity bench's scoring — recall of the visitors wholly in the
picture for a second or more, and the time to their first tracked box — on results made by
hand from a scene's truth."""

from __future__ import annotations

import dataclasses

import pytest

from app.bench.capacity import GOALS, chosen_modes, holds, what_stops
from app.bench.capacity_run import score, whole_span
from pipelines.errors import ConfigError
from pipelines.synthetic.quiet import Visit

VISIT = Visit("astronaut", 0.6, enter_s=2.0, stop_s=3.5, go_s=5.0, leave_s=7.0, stand_x=0.5,
              from_left=True)
TRUTH = {"fps": 10, "frame_count": 100, "width": 640, "height": 360,
         "visits": [dataclasses.asdict(VISIT)]}


def lines(seen_from: float | None, start: float = 0.0, end: float = 10.0) -> list[dict]:
    """One line per frame from ``start`` to ``end`` s; a tracked box from ``seen_from``."""
    out = []
    for k in range(round(start * 10), round(end * 10)):
        tracked = seen_from is not None and k / 10 >= seen_from
        out.append({"pts": k / 10, "detections": [{"track_id": 1}] if tracked else []})
    return out


def test_a_visitor_found_late_or_not_at_all_is_scored_so():
    span = whole_span(VISIT, 640, 360)
    assert span is not None and 2.0 < span[0] < 3.5 and 5.0 < span[1] < 7.0
    due, found, delays = score(lines(seen_from=span[0] + 0.3), TRUTH)
    assert (due, found) == (1, 1) and abs(delays[0] - 0.3) < 0.11
    assert score(lines(seen_from=None), TRUTH)[:2] == (1, 0)
    # a window that does not hold the whole visit does not count it
    assert score(lines(seen_from=0.0, start=4.0), TRUTH)[:2] == (0, 0)


def test_a_count_holds_only_within_every_goal():
    good = {"recall": 1.0, "first_p99_s": 0.5, "dropped_share": 0.0}
    assert holds(good)
    assert not holds(good | {"recall": GOALS["recall"] - 0.01})
    assert not holds(good | {"first_p99_s": 1.5})
    assert not holds(good | {"dropped_share": 0.02})
    assert not holds(good | {"recall": None})


def test_the_table_says_what_stopped_a_count():
    good = {"recall": 1.0, "first_p99_s": 0.5, "dropped_share": 0.0}
    assert what_stops(good) == ""
    dropped = good | {"dropped_share": 0.03, "detected_peak_fps": 71.4, "model_alone_fps": 152.0}
    assert what_stops(dropped) == "drops (detector at most 71/s, the model alone 152/s)"
    late = good | {"first_p99_s": 2.3, "dropped_share": 0.03, "detected_peak_fps": 70.0,
                   "model_alone_fps": None}
    assert what_stops(late) == "first box p99, drops (detector at most 70/s)"
    stale = dropped | {"dropped_by_cause": {"dropped_stale": 2670}}
    assert what_stops(stale) == ("drops (dropped_stale; detector at most 71/s, the model "
                                 "alone 152/s)")


def test_modes_are_named_as_the_table_names_them():
    assert chosen_modes(None) == ["every frame", "detect_fps 5", "+ motion", "+ sub-stream",
                                  "+ sub-stream without clips"]
    with pytest.raises(ConfigError, match="fastest is not a mode"):
        chosen_modes("every frame,fastest")
