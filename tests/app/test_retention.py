"""What the service keeps on disk stays within its retention: rotated results past their
age, then the oldest beyond the size; never a stream's current file."""

import asyncio
import os
import time

from app.service.retention import MB, Housekeeper, prune_results, usage
from app.service.store import ServiceStore
from pipelines.events.media import MediaStore


def write(path, size, age_s, now):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (now - age_s, now - age_s))


def test_rotated_results_go_by_age_then_by_size_and_current_files_stay(tmp_path):
    now = time.time()
    cam = tmp_path / "cam"
    write(cam / "detections.1.jsonl", MB, 10 * 3600, now)  # past 5 h
    write(cam / "detections.2.jsonl", MB, 4 * 3600, now)
    write(cam / "events.1.jsonl", MB, 3 * 3600, now)
    write(cam / "detections.3.jsonl", MB, 2 * 3600, now)
    write(cam / "detections.jsonl", 2 * MB, 20 * 3600, now)  # current: old and big, kept
    assert prune_results(tmp_path, retain_hours=5, retain_mb=4.5, now=now) == 2
    assert sorted(p.name for p in cam.iterdir()) == ["detections.3.jsonl",
                                                     "detections.jsonl", "events.1.jsonl"]
    shown = usage(tmp_path, 5, 4.5)
    assert shown.files == 3 and shown.mb == 4.0 and shown.oldest is not None


def test_the_housekeeper_prunes_media_results_and_the_index_and_says_how_much(tmp_path):
    now = time.time()
    write(tmp_path / "results" / "cam" / "detections.1.jsonl", MB, 200 * 3600, now)
    write(tmp_path / "media" / "cam" / ("a" * 32 + ".mp4"), MB, 200 * 3600, now)
    write(tmp_path / "media" / "cam" / ("b" * 32 + ".mp4"), MB, 1 * 3600, now)
    store = ServiceStore(None)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now - 200 * 3600))
    store.add_event({"id": "c" * 32, "stream": "cam", "type": "new", "time": stamp})
    keeper = Housekeeper(tmp_path / "results", (168.0, 100.0),
                         MediaStore(tmp_path / "media", 168.0, 100.0), store, 168.0)

    async def once():
        keeper.start()  # measured at once, on a worker thread
        for _ in range(100):
            if keeper.media_usage is not None:
                break
            await asyncio.sleep(0.05)
        await keeper.aclose()

    asyncio.run(once())
    assert keeper.results is not None and keeper.results.files == 0
    assert keeper.media_usage is not None and keeper.media_usage.files == 1
    assert keeper.events_indexed == 0
