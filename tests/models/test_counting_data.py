"""Issue 36, item 1: the counting set's truth — split by seed, the crossings each behaviour
makes, walked apart from vidpipe's counter, certain and possible."""

import numpy as np
import pytest

from models.counting_data import (
    FRAMES,
    HELD_OUT_SEEDS,
    LINES,
    TUNE_SEEDS,
    _stop_on_line,
    counting_scene,
    truth_counts,
)
from models.counting_truth import count_error
from models.scene import Scene, SceneObject


def test_the_tuning_and_held_out_parts_share_no_seed():
    assert not set(TUNE_SEEDS) & set(HELD_OUT_SEEDS)


def _alone(path) -> Scene:
    """A scene of one disc following ``path``."""
    base = counting_scene(TUNE_SEEDS[0])
    disc = SceneObject(class_id=0, centre=(path[0][1], path[0][2]), velocity=(0.0, 0.0),
                       radius=30.0, aspect=1.0, angle=0.0, spin=0.0, form=0.5,
                       colour=(200, 40, 40), second=(0, 0, 0), pattern=0, exposure=0.5,
                       path=tuple(path))
    return Scene(base.size, base.background, base.pan, (disc,), base.lighting)


def test_an_object_passing_left_to_right_crosses_the_middle_line_in_once():
    counts = truth_counts(_alone([(0, -40, 100), (100, 680, 100)]))
    assert counts["lines"]["middle"] == {"in": 1, "out": 0}
    assert counts["lines"]["across"] == {"in": 0, "out": 0}  # it stays above y = 230
    assert counts["zones"]["right"] == {"entered": 1, "exited": 1}


@pytest.mark.parametrize("seed", range(6))
def test_an_object_stopping_on_the_line_and_going_on_crosses_once(seed):
    path = _stop_on_line(np.random.default_rng(seed), 30.0, 4.0, 0.0)
    assert path[2][0] - path[1][0] >= 90  # it stands 3-5 s on the line
    assert path[2][0] < FRAMES  # and leaves it within the clip
    counts = truth_counts(_alone(path))
    assert sum(counts["lines"]["middle"].values()) == 1


def test_passing_beyond_the_end_of_the_short_line_does_not_cross_it():
    (_, (x1, y1, x2, y2)), = [line for line in LINES if line[0] == "short"]
    below = y2 + 60  # the disc's bottom passes well below the segment's lower end
    counts = truth_counts(_alone([(0, 40, below - 30), (60, 280, below - 30)]))
    assert counts["lines"]["short"] == {"in": 0, "out": 0}


def test_every_line_is_crossed_in_the_tuning_part():
    totals = {name: 0 for name, _ in LINES}
    for seed in TUNE_SEEDS:
        for name, counts in truth_counts(counting_scene(seed))["lines"].items():
            totals[name] += counts["in"] + counts["out"]
    assert all(total >= 10 for total in totals.values()), totals


def _swaying_on_the_line() -> Scene:
    """A disc (radius 30) that comes from the left and stands on the middle line until the
    clip ends, swaying 2 px either side of it (as a turning shape's bottom-centre does)."""
    sway = [(float(t), 318.0 if (t // 10) % 2 == 0 else 322.0, 100.0)
            for t in range(100, FRAMES + 10, 10)]
    return _alone([(0, -40, 100), *sway])


def test_swaying_across_the_line_where_it_stopped_is_possible_not_certain():
    """Its anchor crosses the line back and forth, never a quarter of its radius past it:
    each change of side is a possible crossing, none a certain one; a count of 0 or 1 is
    right, more than its changes of side is not."""
    counts = truth_counts(_swaying_on_the_line())
    assert counts["lines"]["middle"] == {"in": 0, "out": 0}
    possible = counts["lines_at_most"]["middle"]
    assert possible["in"] >= 2 and possible["out"] >= 1
    truth = {"clip": counts}

    def error(middle: dict[str, int]) -> int:  # every other line counted right
        return count_error({"clip": {**counts["lines"], "middle": middle}}, truth)["errors"]

    assert error({"in": 1, "out": 0}) == 0 and error({"in": 0, "out": 0}) == 0
    assert error({"in": possible["in"] + 3, "out": 0}) == 3


def test_a_crossing_below_the_picture_s_edge_counts_on_a_line_drawn_to_that_edge():
    """A disc whose bottom is below the picture crosses the middle line, drawn to the
    picture's bottom edge: the camera sees its bottom at the edge, and so does the truth."""
    height = counting_scene(TUNE_SEEDS[0]).size[1]
    counts = truth_counts(_alone([(0, -40, height - 10), (100, 680, height - 10)]))
    assert counts["lines"]["middle"] == {"in": 1, "out": 0}


def test_half_of_each_part_passes_behind_bars():
    for seeds in (TUNE_SEEDS, HELD_OUT_SEEDS):
        barred = [s for s in seeds if any(o.class_id < 0 for o in counting_scene(s).objects)]
        assert len(barred) == len(seeds) // 2

