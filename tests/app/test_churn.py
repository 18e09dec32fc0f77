"""Issue 40, item 4: a stream added and removed gives back what it took — its threads and
its open files (decoder, results and events files, sockets) — beside a stream that keeps
running. The long form, with RSS over 150 cycles beside 3 cameras, is
tests/soak/service_churn.py (figures in docs/OPERATIONS.md)."""

from __future__ import annotations

import os
import threading

from tests.app.test_api import client_for, wait_for

CYCLES = 6
WARMUP = 2


def _held() -> tuple[int, int]:
    """This process's threads (but the event loop's default executor's, which grows to its
    size on demand) and open files."""
    threads = [t for t in threading.enumerate() if not t.name.startswith("asyncio_")]
    return len(threads), len(os.listdir("/proc/self/fd"))


def test_add_remove_cycles_give_back_threads_and_open_files(media_root, tmp_path):
    events = {"media_dir": str(tmp_path / "events"), "snapshots": True, "clips": {}}
    with client_for(media_root, events=events) as client:
        body = {"url": str(media_root / "cam.mp4"), "track": "bytetrack"}
        assert client.post("/api/streams", json=body | {"id": "keep"}).status_code == 201
        before = None
        for k in range(WARMUP + CYCLES):
            if k == WARMUP:
                before = _held()
            assert client.post("/api/streams", json=body | {"id": "cycled"}).status_code == 201
            wait_for(lambda: 'vidpipe_frames_total{outcome="processed",stream="cycled"}'
                     in client.get("/metrics").text)
            assert client.delete("/api/streams/cycled").status_code == 204
        try:
            after = wait_for(lambda: _fits(before, held := _held()) and held)
        except AssertionError:
            after = _held()
        assert client.get("/api/streams/keep").json()["state"] == "up"
    assert _fits(before, after), (before, after, [t.name for t in threading.enumerate()])


def _fits(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """No thread more, and at most 2 more open files (the issue's bound is 4)."""
    return after[0] <= before[0] and after[1] <= before[1] + 2
