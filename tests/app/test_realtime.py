"""Real time in the results of a camera restarted twice (issue 34, item 3): every line's pts
never null and always rising across the reconnects, its ``time`` within a second of the
host's clock, and each outage counted as a gap, in the lines and in /api/stats. The ten
minute run: ``python tests/soak/rtsp_timeline.py``."""

import asyncio

import pytest

from tests.soak.rtsp_timeline import check

pytestmark = pytest.mark.slow  # a real RTSP server killed twice, 30 s


def test_pts_goes_on_across_two_restarts_and_the_gaps_are_counted(rtsp_servers):
    figures = asyncio.run(check(rtsp_servers, seconds=30.0, restarts=2, outage_s=3.0))
    print(f"\n{figures}")
    assert figures["lines"] > 300, figures
    assert figures["null_pts"] == 0 and figures["pts_not_increasing"] == 0, figures
    assert figures["max_time_skew_s"] < 1.0, figures
    assert figures["reconnects"] == 2 and figures["gaps_counted"] == 2, figures
    assert len(figures["gaps_in_lines"]) == 2, figures
    # each gap is the outage and the time to notice and come back: between 3 and 3 + 6 s
    assert all(3.0 <= gap <= 9.0 for gap in figures["gaps_in_lines"]), figures
    assert figures["gap_s"] == pytest.approx(sum(figures["gaps_in_lines"]), abs=0.01)
