"""The shared detector: one FairChannel and one set of inference stages behind every stream."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from prometheus_client import generate_latest

from pipelines.backends import host_backends
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.shared.detector import SharedDetector
from pipelines.shared.fair import FairChannel
from tests.support.fakes import FAKE_SPEC, FakeBackend, FakeDecoder, FakeSource, ListSink


def _fair(capacity: int = 8) -> tuple[FairChannel[tuple[str, int]], list]:
    dropped: list = []
    fair: FairChannel[tuple[str, int]] = FairChannel(
        "prepared", capacity, lambda item: item[0],
        on_drop=lambda item, cause: dropped.append((item, cause)))
    return fair, dropped


def test_a_batch_takes_round_the_streams_in_turn():
    fair, _ = _fair()

    async def main() -> list[list[tuple[str, int]]]:
        inlets = {s: fair.attach(s, "block") for s in "abc"}
        for stream, count in (("a", 6), ("b", 1), ("c", 3)):
            for i in range(count):
                await inlets[stream].put((stream, i))
        batches = []
        while len(fair):
            batches.append([item for item, _ in await fair.get_batch(4, 0.0)])
        return batches

    batches = asyncio.run(main())
    assert [[s for s, _ in b] for b in batches] == [["a", "b", "c", "a"], ["c", "a", "c", "a"],
                                                     ["a", "a"]]
    assert all([i for s, i in sum(batches, []) if s == x] == sorted(
        i for s, i in sum(batches, []) if s == x) for x in "abc")  # each stream in order


def test_saturated_streams_get_equal_shares():
    fair, _ = _fair(capacity=64)

    async def main() -> Counter[str]:
        inlets = [fair.attach(f"s{k}", "block") for k in range(8)]
        for inlet in inlets:
            for i in range(60):
                await inlet.put((inlet.stream, i))
        served: Counter[str] = Counter()
        for _ in range(30):  # 30 batches of 4: 120 of the 480 queued
            served.update(s for (s, _), _ in await fair.get_batch(4, 0.0))
        return served

    served = asyncio.run(main())
    assert set(served.values()) == {15}, served


def test_a_live_stream_drops_only_its_own_oldest_and_a_blocked_one_waits_alone():
    fair, dropped = _fair(capacity=2)

    async def main() -> bool:
        live, blocked = fair.attach("live", "drop_oldest"), fair.attach("file", "block")
        for i in range(4):
            await live.put(("live", i))
        await blocked.put(("file", 0))
        await blocked.put(("file", 1))
        waiting = asyncio.create_task(blocked.put(("file", 2)))
        await asyncio.sleep(0.05)
        stuck = not waiting.done()
        await live.put(("live", 4))  # the file's full queue does not hold the camera up
        await fair.get_batch(2, 0.0)  # one of each: room for the file again
        await asyncio.wait_for(waiting, 1)
        return stuck

    assert asyncio.run(main())
    assert dropped == [(("live", 0), "dropped_full"), (("live", 1), "dropped_full"),
                       (("live", 2), "dropped_full")]


def _run(detector: SharedDetector, scenario) -> None:
    """``scenario()`` while the detector runs; then the detector is closed and released."""
    async def main() -> None:
        running = asyncio.create_task(detector.run())
        await scenario()
        detector.close()
        await asyncio.wait_for(running, 5)

    try:
        asyncio.run(main())
    finally:
        detector.release()


def test_streams_attach_and_detach_while_the_detector_runs_and_every_frame_is_counted():
    metrics = PipelineMetrics()
    backend = FakeBackend(seconds_per_frame=0.001)
    detector = SharedDetector("fake@cpu", host_backends(lambda s: FakeDecoder(), backend,
                                                        FAKE_SPEC),
                              FAKE_SPEC, metrics, PipelineOptions(capacity=4), batch_size=4)
    sinks = {s: ListSink() for s in ("a", "b", "c", "late")}

    async def stream(sid: str, frames: int) -> None:
        intake = detector.attach(FakeSource(sid, frames), [sinks[sid]], "block")
        await intake.run()
        await detector.detach(sid)

    async def scenario() -> None:
        first = [asyncio.create_task(stream(s, 40)) for s in "abc"]
        await asyncio.sleep(0.02)
        await asyncio.gather(stream("late", 25), *first)
        assert detector.streams == []

    _run(detector, scenario)
    for sid, frames in (("a", 40), ("b", 40), ("c", 40), ("late", 25)):
        assert [r.frame.stream_id for r in sinks[sid].results] == [sid] * frames
        assert [r.frame.index for r in sinks[sid].results] == list(range(frames))
        assert metrics.outcomes[sid]["processed"] == frames and metrics.unaccounted(sid) == 0
    assert max(backend.batch_sizes) > 1  # streams were batched together


def test_an_intake_stopped_mid_run_leaves_its_books_balanced():
    metrics = PipelineMetrics()
    detector = SharedDetector("fake@cpu", host_backends(lambda s: FakeDecoder(0.002),
                                                        FakeBackend(0.002), FAKE_SPEC),
                              FAKE_SPEC, metrics, PipelineOptions(capacity=2), batch_size=2)

    async def scenario() -> None:
        intake = detector.attach(FakeSource("cam", 10_000), [ListSink()], "drop_oldest")
        task = asyncio.create_task(intake.run())
        await asyncio.sleep(0.3)
        await intake.stop(drain=False)
        with pytest.raises(asyncio.CancelledError):
            await task
        await detector.detach("cam")

    _run(detector, scenario)
    outcomes = metrics.outcomes["cam"]
    assert metrics.received["cam"] == sum(outcomes.values()) > 0, dict(outcomes)
    assert outcomes["processed"] > 0


class _Dying(FakeBackend):
    """Fails every call from its ``calls``-th on: a runtime that died."""

    def __init__(self, calls: int) -> None:
        super().__init__(seconds_per_frame=0.001)
        self.calls = calls

    def infer(self, feeds):
        self.calls -= 1
        if self.calls < 0:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().infer(feeds)


def _detector(metrics, backend, *, reopen=None, budget=None, states=None) -> SharedDetector:
    from pipelines.shared.restarts import RestartBudget

    return SharedDetector(
        "fake@cpu", host_backends(lambda s: FakeDecoder(0.001), backend, FAKE_SPEC), FAKE_SPEC,
        metrics, PipelineOptions(capacity=2), batch_size=2,
        reopen=None if reopen is None else
        (lambda: host_backends(lambda s: FakeDecoder(), reopen(), FAKE_SPEC)),
        restarts=budget or RestartBudget(first_delay_s=0.05),
        on_state=None if states is None else (lambda state, error: states.append(state)))


def test_a_failed_detector_is_rebuilt_and_its_streams_go_on_with_every_frame_counted():
    metrics = PipelineMetrics()
    states: list[str] = []
    detector = _detector(metrics, _Dying(calls=5), reopen=FakeBackend, states=states)
    sinks = {s: ListSink() for s in "ab"}

    async def stream(sid: str) -> None:
        intake = detector.attach(FakeSource(sid, 60), [sinks[sid]], "block")
        await intake.run()
        await detector.detach(sid)

    async def scenario() -> None:
        await asyncio.gather(stream("a"), stream("b"))

    _run(detector, scenario)
    assert states == ["restarting", "up"]
    lost = sum(metrics.outcomes[s]["model_error"] for s in "ab")
    assert lost > 0
    for sid in "ab":
        outcomes = metrics.outcomes[sid]
        assert outcomes["processed"] + outcomes["model_error"] == 60, dict(outcomes)
        assert len(sinks[sid].results) == outcomes["processed"] > 30
    text = generate_latest(metrics.registry).decode()
    assert 'vidpipe_detector_restarts_total{device="cpu",model="fake"} 1.0' in text


def test_a_detector_that_keeps_failing_stops_being_rebuilt():
    from pipelines.shared.restarts import RestartBudget

    metrics = PipelineMetrics()
    states: list[str] = []
    detector = _detector(metrics, _Dying(calls=0), reopen=lambda: _Dying(calls=0),
                         budget=RestartBudget(max_restarts=2, first_delay_s=0.01),
                         states=states)

    async def main() -> None:
        running = asyncio.create_task(detector.run())
        intake = detector.attach(FakeSource("cam", 10_000), [ListSink()], "block")
        fed = asyncio.create_task(intake.run())
        with pytest.raises(RuntimeError, match="illegal memory access"):
            await asyncio.wait_for(running, 10)
        await intake.stop(drain=False)
        await asyncio.gather(fed, return_exceptions=True)
        await detector.detach("cam", timeout_s=0.1)

    try:
        asyncio.run(main())
    finally:
        detector.release()
    assert states == ["restarting", "up", "restarting", "up", "failed"]
    assert metrics.received["cam"] == sum(metrics.outcomes["cam"].values())
    assert metrics.outcomes["cam"]["model_error"] > 0


def test_a_frame_the_model_cannot_take_costs_only_its_own_stream():
    from pipelines.infer.runtime import HostRuntime

    class Picky(HostRuntime):
        def infer(self, batches):
            if any(b.frames[0].stream_id == "bad" and b.frames[0].index % 10 == 3
                   for b in batches):
                raise RuntimeError("invalid input")
            return super().infer(batches)

    metrics = PipelineMetrics()
    backends = host_backends(lambda s: FakeDecoder(), FakeBackend(0.001), FAKE_SPEC)
    backends.runtime = Picky(FakeBackend(0.001), backends.input.name)
    detector = SharedDetector("fake@cpu", backends, FAKE_SPEC, metrics,
                              PipelineOptions(capacity=2), batch_size=4)
    sinks = {s: ListSink() for s in ("good", "bad")}

    async def stream(sid: str) -> None:
        intake = detector.attach(FakeSource(sid, 40), [sinks[sid]], "block")
        await intake.run()
        await detector.detach(sid)

    async def scenario() -> None:
        await asyncio.gather(stream("good"), stream("bad"))

    _run(detector, scenario)
    assert metrics.outcomes["good"]["processed"] == 40
    assert metrics.outcomes["bad"]["model_error"] == 4
    assert [r.frame.index % 10 for r in sinks["bad"].results].count(3) == 0
    assert metrics.outcomes["bad"]["processed"] == 36


def test_a_live_stream_keeps_only_its_newest_frame_waiting():
    fair, dropped = _fair(capacity=4)

    async def main() -> list:
        live = fair.attach("cam", "drop_oldest", capacity=1)
        file = fair.attach("file", "block")
        for i in range(3):
            await live.put(("cam", i))
            await file.put(("file", i))
        return [item for item, _ in await fair.get_batch(8, 0.0)]

    taken = asyncio.run(main())
    assert taken == [("cam", 2), ("file", 0), ("file", 1), ("file", 2)]
    assert dropped == [(("cam", 0), "dropped_full"), (("cam", 1), "dropped_full")]


def _tracked(stream: str, every: int):
    from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
    from pipelines.analytics.stream import StreamAnalytics

    return StreamAnalytics(stream, AnalyticsConfig(track=TrackerSettings(), detect_every=every),
                           FAKE_SPEC, 30.0)


@pytest.mark.parametrize("failing", [False, True])
def test_tracked_streams_detecting_every_nth_frame_share_a_detector_with_every_frame_counted(
        failing):
    """Issue 18 in the service: a stream with --detect-every 3 beside one without; the riders
    count in the detector's books, a failure's model_error included."""
    metrics = PipelineMetrics()
    if failing:
        detector = _detector(metrics, _Dying(calls=3), reopen=FakeBackend, states=[])
    else:
        detector = SharedDetector("fake@cpu", host_backends(lambda s: FakeDecoder(),
                                                            FakeBackend(0.001), FAKE_SPEC),
                                  FAKE_SPEC, metrics, PipelineOptions(capacity=4), batch_size=4)
    sinks = {s: ListSink() for s in "ab"}

    async def stream(sid: str, analytics) -> None:
        intake = detector.attach(FakeSource(sid, 45), [sinks[sid]], "block", analytics)
        await intake.run()
        await detector.detach(sid)

    async def scenario() -> None:
        await asyncio.gather(stream("a", _tracked("a", 3)), stream("b", None))

    _run(detector, scenario)
    for sid in "ab":
        outcomes = metrics.outcomes[sid]
        assert sum(outcomes.values()) == metrics.received[sid] == 45, dict(outcomes)
        assert metrics.unaccounted(sid) == 0
        assert outcomes["processed"] == len(sinks[sid].results)
        if not failing:
            assert [r.frame.index for r in sinks[sid].results] == list(range(45))
    predicted = [r.predicted for r in sinks["a"].results]
    assert any(predicted) and not any(r.predicted for r in sinks["b"].results)
    assert all(r.analytics is not None for r in sinks["a"].results)
    assert all(r.analytics is None for r in sinks["b"].results)
    if failing:
        assert sum(metrics.outcomes[s]["model_error"] for s in "ab") > 0
