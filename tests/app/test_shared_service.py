"""The service's streams share one detector per (model, device): loaded once, batched
together, attached and detached at runtime, each stream's books balanced."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from app.service.config import ServiceConfig, StreamConfig
from app.service.service import Service
from app.service.stats import stats
from pipelines.metrics import PipelineMetrics


def _service(media, **keys) -> Service:
    keys.setdefault("results_dir", media.parent / "results")
    config = ServiceConfig(media_roots=[media], model="shapes-yolo", **keys)
    return Service(config, PipelineMetrics())


async def _until(condition, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_eight_streams_load_the_model_once_and_share_its_batches(small_clip, tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    service = _service(media, batch_size=8)
    metrics = service.metrics
    ids = [f"cam{k}" for k in range(8)]

    async def main() -> None:
        async with service:
            for sid in ids:
                await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id=sid))
            await _until(lambda: all(metrics.outcomes[s]["processed"] >= 10 for s in ids))
            assert len(service.detectors.loaded) == 1
            (detector,) = service.detectors.loaded.values()
            assert sorted(detector.streams) == ids
            (shown,) = stats(service).detectors
            assert (shown.model, shown.device, sorted(shown.streams)) == ("shapes-yolo", "cpu",
                                                                          ids)
            assert shown.fps > 0 and sum(shown.batches.values()) > 0
            await service.remove_stream("cam3")  # the others go on
            before = {s: metrics.outcomes[s]["processed"] for s in ids if s != "cam3"}
            await _until(lambda: all(metrics.outcomes[s]["processed"] > before[s] + 5
                                     for s in before))
            assert "cam3" not in detector.streams
        assert service.detectors.loaded == {}  # unloaded with its last stream

    asyncio.run(main())
    assert metrics.model_loads == {("shapes-yolo", "cpu"): 1}
    assert 'vidpipe_model_loads_total{device="cpu",model="shapes-yolo"} 1.0' in \
        generate_latest(metrics.registry).decode()
    assert max(metrics.batch_sizes) > 1  # frames of several streams in one inference call
    for sid in ids:
        assert metrics.received[sid] == sum(metrics.outcomes[sid].values()), sid


def test_a_stream_with_a_bad_source_fails_alone(small_clip, tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    (media / "broken.mp4").write_bytes(small_clip.read_bytes()[:2000])  # a cut-off file
    service = _service(media)

    async def main() -> None:
        async with service:
            good = await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id="ok"))
            try:
                await service.add_stream(StreamConfig(url=str(media / "broken.mp4"),
                                                      id="bad"))
            except Exception:  # refused at once: fine, the other stream must not notice
                pass
            await _until(lambda: service.metrics.outcomes["ok"]["processed"] >= 20)
            assert good.state == "up"

    asyncio.run(main())


def test_a_failed_detector_fails_its_streams_and_a_new_stream_gets_a_new_one(small_clip,
                                                                              tmp_path,
                                                                              monkeypatch):
    from pipelines.backends import host_backends
    from pipelines.decode.pyav import PyAVDecoder
    from pipelines.shared.detector import SharedDetector
    from tests.support.fakes import FAKE_SPEC, FakeBackend

    class Broken(FakeBackend):
        def infer(self, feeds):
            raise RuntimeError("the runtime died")

    made: list[SharedDetector] = []

    def open_fake(cls, name, model_path, spec, metrics, options):
        backend = Broken() if not made else FakeBackend()
        made.append(cls(name, host_backends(lambda s: PyAVDecoder(s.video), backend, FAKE_SPEC),
                        FAKE_SPEC, metrics, options, batch_size=2))
        return made[-1]

    monkeypatch.setattr(SharedDetector, "open", classmethod(open_fake))
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    service = _service(media)

    async def main() -> None:
        async with service:
            first = await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id="a"))
            await _until(lambda: first.state == "failed")
            assert "the runtime died" in (first.error or "")
            second = await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id="b"))
            await _until(lambda: service.metrics.outcomes["b"]["processed"] >= 10)
            assert second.state == "up" and len(made) == 2

    asyncio.run(main())
    for sid in ("a", "b"):
        assert service.metrics.received[sid] == sum(service.metrics.outcomes[sid].values())


def test_a_rebuilt_detector_shows_restarting_then_up_and_its_streams_go_on(small_clip,
                                                                          tmp_path,
                                                                          monkeypatch):
    from pipelines.backends import host_backends
    from pipelines.decode.pyav import PyAVDecoder
    from pipelines.shared.detector import SharedDetector
    from pipelines.shared.restarts import RestartBudget
    from tests.support.fakes import FAKE_SPEC, FakeBackend

    class DiesOnce(FakeBackend):
        calls = 0

        def infer(self, feeds):
            DiesOnce.calls += 1
            if 20 <= DiesOnce.calls < 25:  # the retries of its frames alone fail too
                raise RuntimeError("the runtime died")
            return super().infer(feeds)

    def open_fake(cls, name, model_path, spec, metrics, options):
        def backends(backend):
            return host_backends(lambda s: PyAVDecoder(s.video), backend, FAKE_SPEC)

        return cls(name, backends(DiesOnce(0.002)), FAKE_SPEC, metrics, options, batch_size=2,
                   reopen=lambda: backends(FakeBackend(0.002)),
                   restarts=RestartBudget(first_delay_s=0.3))

    monkeypatch.setattr(SharedDetector, "open", classmethod(open_fake))
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    service = _service(media)
    seen: list[str] = []

    async def main() -> None:
        async with service:
            events = service.feed.subscribe()
            rt = await service.add_stream(StreamConfig(url=str(media / "cam.mp4"), id="a"))
            await _until(lambda: rt.state == "restarting")
            assert "the runtime died" in (rt.error or "")
            assert 'vidpipe_stream_up{stream="a"} 0.0' in \
                generate_latest(service.metrics.registry).decode()
            await _until(lambda: rt.state == "up")
            before = service.metrics.outcomes["a"]["processed"]
            await _until(lambda: service.metrics.outcomes["a"]["processed"] > before + 10)
            assert rt.error is None
            while not events.empty():
                seen.append(events.get_nowait()["stream"]["state"])

    asyncio.run(main())
    assert "restarting" in seen and seen.index("restarting") < len(seen) - 1
    assert seen[seen.index("restarting") + 1] == "up"
    outcomes = service.metrics.outcomes["a"]
    assert outcomes["model_error"] > 0
    assert service.metrics.received["a"] == sum(outcomes.values())
