"""Issue 35, item 6: the service knows its headroom — how many more cameras like the running
ones the machine holds, from what they cost — refuses one past it (409, with the figure)
unless forced, and then says it is overloaded."""

from __future__ import annotations

import pytest

from app.errors import OverCapacity
from app.service.headroom import Headroom
from tests.app.test_api import client_for, wait_for


def measured(cameras: list[int], cores_used: float, cores: int = 2) -> Headroom:
    """A headroom that saw ``cameras[0]`` cameras run for 20 s using ``cores_used``."""
    room = Headroom(lambda: cameras[0], cores=cores)
    for k in range(11):
        room.sample(now=2.0 * k, cpu=2.0 * k * cores_used)
    return room


def test_nothing_is_known_or_refused_before_a_camera_has_run():
    room = measured([0], 0.1)
    assert room.figures() is None
    room.check(force=False)  # no figure: no refusal


def test_a_camera_past_the_machines_cores_is_refused_with_the_figure():
    cameras = [2]
    room = measured(cameras, 0.5)  # 2 cameras, half a core: a quarter of a core each
    figures = room.figures()
    assert figures is not None
    assert (figures.camera_cores, figures.holds, figures.more) == (0.25, 6, 4)
    room.check(force=False)
    cameras[0] = 6  # as many as it holds (85 % of 2 cores at 0.25 each)
    with pytest.raises(OverCapacity, match=r"holds about 6 cameras like the 6 running "
                                           r"\(0.25 of a core each"):
        room.check(force=False)
    room.check(force=True)
    cameras[0] = 7
    assert room.figures().overloaded  # type: ignore[union-attr]


def test_the_api_refuses_past_the_headroom_and_shows_a_forced_overload(media_root):
    with client_for(media_root) as client:
        service = client.app.state.service
        body = {"url": str(media_root / "cam.mp4")}
        assert client.post("/api/streams", json=body | {"id": "a"}).status_code == 201
        wait_for(lambda: service.streams["a"].state == "up")
        running = [1]
        service.headroom = measured(running, 1.0, cores=1)  # one camera takes a whole core
        refused = client.post("/api/streams", json=body | {"id": "b"})
        assert refused.status_code == 409, refused.text
        assert "holds about 0 cameras like the 1 running" in refused.json()["detail"]
        assert "b" not in service.streams  # nothing opened, nothing left behind
        forced = client.post("/api/streams?force=true", json=body | {"id": "b"})
        assert forced.status_code == 201, forced.text
        running[0] = 2
        room = client.get("/api/stats").json()["headroom"]
        assert room["overloaded"] and room["more"] == 0 and room["cameras"] == 2
