"""Results leave the service: every processed frame once in its stream's JSON lines (rotated),
and live, as server-sent events, on ``GET /api/streams/{id}/results``."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig, StreamConfig
from app.service.service import Service
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.rotating import result_files
from tests.support.api import LOCAL


def _media(small_clip, tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    return media


@pytest.mark.slow
def test_every_processed_frame_is_in_its_streams_files_once(small_clip, tmp_path):
    media = _media(small_clip, tmp_path)
    results = tmp_path / "results"
    config = ServiceConfig(media_roots=[media], model="shapes-yolo", results_dir=results,
                           results_rotate_mb=0.02)  # 20 kB: rotated several times
    service = Service(config, PipelineMetrics())
    metrics = service.metrics

    async def main() -> None:
        async with service:
            for sid in ("a", "b"):
                await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id=sid))
            deadline = time.monotonic() + 60
            while min(metrics.outcomes[s]["processed"] for s in "ab") < 150:
                assert time.monotonic() < deadline, "timed out"
                await asyncio.sleep(0.1)

    asyncio.run(main())
    for sid in ("a", "b"):
        files = result_files(results / sid)
        assert len(files) >= 3, files  # rotated
        records = [json.loads(line) for path in files for line in path.read_text().splitlines()]
        assert len(records) == metrics.outcomes[sid]["processed"]
        assert {r["stream"] for r in records} == {sid}
        frames = [r["frame"] for r in records]
        assert frames == sorted(frames) and len(set(frames)) == len(frames)
        assert all(set(r) == {"stream", "frame", "pts", "time", "detections", "model"}
                   for r in records)
        assert {r["model"] for r in records} == {"model.onnx"}  # the model file that saw it
        pts = [r["pts"] for r in records]  # a looped file's pts go on, never back
        assert all(b > a for a, b in zip(pts, pts[1:], strict=False))


def _events(response, count: int) -> list[tuple[str, str]]:
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[len("event: "):]
        elif line.startswith("data: "):
            events.append((kind, line[len("data: "):]))
            if len(events) == count:
                return events
    return events


def test_the_results_feed_sends_each_processed_frame(small_clip, tmp_path):
    media = _media(small_clip, tmp_path)
    config = ServiceConfig(media_roots=[media], model="shapes-yolo",
                           results_dir=tmp_path / "results", api_token="tok",
                           streams=[StreamConfig(url=str(media / "cam.mp4"), id="cam")])
    with TestClient(create_app(config), base_url=LOCAL) as client:
        assert client.get("/api/streams/cam/results").status_code == 401  # data: token
        assert client.get("/api/streams/nope/results",
                          headers={"Authorization": "Bearer tok"}).status_code == 404
        with client.stream("GET", "/api/streams/cam/results",
                           headers={"Authorization": "Bearer tok"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = _events(response, 10)
    results = [json.loads(data) for kind, data in events if kind == "result"]
    assert len(results) >= 9 and {r["stream"] for r in results} == {"cam"}
    frames = [r["frame"] for r in results]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)
    assert all(kind in ("result", "lost") for kind, _ in events)


def test_a_removed_stream_ends_its_feed(small_clip, tmp_path):
    media = _media(small_clip, tmp_path)
    config = ServiceConfig(media_roots=[media], model="shapes-yolo",
                           results_dir=tmp_path / "results",
                           streams=[StreamConfig(url=str(media / "cam.mp4"), id="cam")])
    app = create_app(config)

    async def main() -> list:
        async with app.router.lifespan_context(app):
            service: Service = app.state.service
            live = service.streams["cam"].outputs.live
            reader = live.subscribe()
            first = await reader.next(30.0)
            await service.remove_stream("cam")
            seen = [first]
            while (item := await reader.next(5.0)) is not None:
                assert item != ("", 0), "the feed did not end"
                seen.append(item)
            return seen

    seen = asyncio.run(main())
    assert seen and all(line for line, _ in seen)
