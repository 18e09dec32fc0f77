"""RTSP sources: URLs without credentials in sight, the reconnection schedule, and a real
GStreamer RTSP server on 127.0.0.1 that is killed, frozen and restarted under a running source."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from pipelines.backends import host_backends
from pipelines.build import wire_pipeline
from pipelines.decode.pyav import PyAVDecoder
from pipelines.errors import ConfigError
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.sources.rtsp import RtspSource
from tests.rtsp_fixtures import Viewer, free_port, wait_until
from tests.support.fakes import FAKE_SPEC, FakeBackend, ListSink

SECRET = "s3cr3t-Pa55"
COME_BACK_LIMIT_S = 5.0  # the acceptance: up again within 5 s of the server's return


# -- URLs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, complaint", [
    ({"transport": "quic"}, "transport must be one of"),
    ({"open_timeout_s": 0}, "open timeout must be > 0"),
    ({"stall_timeout_s": -1}, "stall timeout must be > 0"),
    ({"max_attempts": 0}, "max attempts must be >= 1"),
    ({"backoff_initial_s": 3.0, "backoff_max_s": 2.0}, "0 < initial <= cap"),
    ({"jitter": 1.0}, r"jitter must be in \[0, 1\)"),
    ({"stream_id": f"rtsp://admin:{SECRET}@127.0.0.1:1/x"}, "holds credentials; name the"),
])
def test_source_rejects_bad_settings_naming_the_allowed_values(kwargs, complaint):
    settings = dict(kwargs)
    stream_id = settings.pop("stream_id", "a")
    with pytest.raises(ConfigError, match=complaint) as info:
        RtspSource(f"rtsp://admin:{SECRET}@127.0.0.1:1/x", stream_id, **settings)
    assert SECRET not in str(info.value)


# -- no server at all --------------------------------------------------------------------------
def test_source_fails_after_max_attempts_when_nothing_listens(caplog):
    caplog.set_level(logging.DEBUG, logger="pipelines.sources.rtsp")
    states = []
    source = RtspSource(f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/cam", "a",
                        max_attempts=3, backoff_initial_s=0.01, backoff_max_s=0.02,
                        on_state=states.append)
    start = time.monotonic()
    assert list(source.packets()) == []
    assert time.monotonic() - start < 3.0
    assert states == ["failed"] and source.state == "failed"
    assert source.epoch == 0 and source.reconnects == 0
    source.close()
    assert source.state == "failed"  # closing a failed source keeps the reason
    assert "giving up after 3 failed attempts" in caplog.text
    assert "rtsp://***@127.0.0.1" in caplog.text and SECRET not in caplog.text


def test_close_from_another_thread_ends_packets_while_waiting_to_reconnect():
    source = RtspSource(f"rtsp://127.0.0.1:{free_port()}/cam", "a", backoff_initial_s=30.0,
                        backoff_max_s=30.0)
    packets = source.packets()
    threading.Timer(0.3, source.close).start()
    start = time.monotonic()
    assert list(packets) == []
    assert 0.25 < time.monotonic() - start < 1.5
    assert source.state == "stopped"
    source.close()  # idempotent


# -- a real server ---------------------------------------------------------------------------
def test_source_delivers_packets_that_decode_to_frames_of_the_stream_size(rtsp_servers, caplog,
                                                                          capfd):
    caplog.set_level(logging.DEBUG)
    server = rtsp_servers.start(size=(416, 240))  # not the server's default size
    source = RtspSource(server.url_with(f"admin:{SECRET}"), "cam")
    viewer = Viewer(source)
    try:
        viewer.wait_for_frame(epoch=1, after=0.0, timeout_s=10)
        time.sleep(1.0)
    finally:
        closing_s = viewer.stop()
    assert closing_s < 1.0  # a live stream's next packet wakes the reader at once
    assert {shape for _, _, shape in viewer.frames} == {(240, 416, 3)}
    assert len(viewer.frames) >= 20  # about 30 fps for a second and more
    assert viewer.decode_errors == 0
    assert source.epoch == 1 and source.reconnects == 0 and source.state == "stopped"
    shown = caplog.text + repr(source) + source.describe() + "".join(capfd.readouterr())
    assert "rtsp://***@127.0.0.1" in repr(source) and SECRET not in shown


OUTAGES_S = (1.0, 2.0, 3.0, 4.0, 6.0)  # the longer ones let the backoff reach its cap


@pytest.mark.slow
def test_source_comes_back_within_5s_of_each_of_five_server_restarts(rtsp_servers, caplog):
    caplog.set_level(logging.INFO)
    server = rtsp_servers.start()
    states: list[str] = []
    reconnects = []
    source = RtspSource(server.url_with(f"admin:{SECRET}"), "cam", open_timeout_s=2.0,
                        read_timeout_s=2.0, on_state=states.append,
                        on_reconnect=lambda: reconnects.append(time.monotonic()), rng_seed=1)
    viewer = Viewer(source)
    come_back = []
    try:
        viewer.wait_for_frame(epoch=1, after=0.0, timeout_s=10)
        for n, outage_s in enumerate(OUTAGES_S, start=1):
            time.sleep(0.5)  # streaming mid-way when the server dies
            server.kill()
            wait_until(lambda: source.state == "reconnecting", 3.0, "reconnecting after a kill")
            time.sleep(outage_s)
            ready = server.start()
            first = viewer.wait_for_frame(epoch=n + 1, after=ready, timeout_s=15)
            come_back.append(first - ready)
            assert source.reconnects == n == len(reconnects)
            assert reconnects[-1] > ready
    finally:
        viewer.stop()
    print(f"\nRTSP come-back after server restarts (outages {OUTAGES_S} s): "
          + ", ".join(f"{s:.2f} s" for s in come_back)
          + f"; reconnects {source.reconnects}")
    assert max(come_back) <= COME_BACK_LIMIT_S, come_back
    # an outage past down_after_s (5 s: the 6 s one) shows as unreachable before it is up again
    assert [s for s in states if s != "unreachable"] == \
        ["up"] + ["reconnecting", "up"] * len(OUTAGES_S) + ["stopped"]
    assert 1 <= states.count("unreachable") <= 2
    assert all(states[i - 1] == "reconnecting" and states[i + 1] == "up"
               for i, s in enumerate(states) if s == "unreachable")
    assert source.epoch == len(OUTAGES_S) + 1
    assert SECRET not in caplog.text


@pytest.mark.slow
def test_worst_case_come_back_is_the_backoff_cap_plus_one_connection(rtsp_servers):
    # The server returns just after a failed attempt, once the backoff has reached its cap:
    # the longest wait there is. Jitter only shortens delays, so without it this is the bound.
    server = rtsp_servers.start()
    source = RtspSource(server.url, "cam", jitter=0.0)
    viewer = Viewer(source)
    try:
        viewer.wait_for_frame(epoch=1, after=0.0, timeout_s=10)
        server.kill()
        # delays double from 0.25 s: after the 5th failure they have reached any cap up to 8 s
        wait_until(lambda: source.status.attempts >= 5, 15.0, "five failed attempts")
        ready = server.start()
        come_back = viewer.wait_for_frame(epoch=2, after=ready, timeout_s=15) - ready
    finally:
        viewer.stop()
    print(f"\nRTSP worst-case come-back: {come_back:.2f} s (backoff cap {source.backoff.cap} s)")
    assert come_back <= min(COME_BACK_LIMIT_S, source.backoff.cap + 1.0)
    assert come_back >= source.backoff.cap - 1.0  # it really was the worst case
    assert source.reconnects == 1


@pytest.mark.slow
def test_a_frozen_server_is_a_stall_and_the_source_recovers_when_it_wakes(rtsp_servers):
    server = rtsp_servers.start()
    source = RtspSource(server.url, "cam", open_timeout_s=1.0, read_timeout_s=5.0,
                        stall_timeout_s=1.0, backoff_max_s=0.5)
    viewer = Viewer(source)
    try:
        viewer.wait_for_frame(epoch=1, after=0.0, timeout_s=10)
        server.freeze()
        frozen = time.monotonic()
        noticed = wait_until(lambda: source.state == "reconnecting", 4.0, "a stall noticed")
        time.sleep(1.0)
        server.thaw()
        thawed = time.monotonic()
        viewer.wait_for_frame(epoch=2, after=thawed, timeout_s=8)
        server.freeze()  # now close while the reader waits on a silent server
        time.sleep(0.3)
    finally:
        closing_s = viewer.stop()
    # the stall timeout (1 s), not the read timeout (5 s), decides
    assert 0.9 <= noticed - frozen <= 2.5
    assert source.reconnects == 1
    assert closing_s <= 1.5 and source.state == "stopped"


# -- a pipeline of two live streams ----------------------------------------------------------
def rate(sink: ListSink, stream: str, seconds: float) -> float:
    """Results per second of ``stream`` over the next ``seconds``."""
    before = sum(1 for r in list(sink.results) if r.frame.stream_id == stream)
    time.sleep(seconds)
    after = sum(1 for r in list(sink.results) if r.frame.stream_id == stream)
    return (after - before) / seconds


@pytest.mark.slow
def test_pipeline_keeps_the_other_streams_rate_while_one_reconnects(rtsp_servers, caplog):
    caplog.set_level(logging.INFO)
    servers = {"a": rtsp_servers.start(), "b": rtsp_servers.start()}
    metrics = PipelineMetrics()
    sources = [RtspSource(servers[sid].url_with(f"admin:{SECRET}"), sid, read_timeout_s=2.0,
                          on_state=lambda s, sid=sid: metrics.set_stream_up(sid, s == "up"),
                          on_reconnect=lambda sid=sid: metrics.count_reconnect(sid))
               for sid in ("a", "b")]
    sink = ListSink()
    options = PipelineOptions(batch_size=4, batch_timeout_ms=10)
    backends = host_backends(lambda s: PyAVDecoder(s.video, threads=1), FakeBackend(),
                             FAKE_SPEC)
    pipeline = wire_pipeline(sources, backends, FAKE_SPEC, [sink], metrics, options,
                             options.batch_size)

    async def scenario() -> dict[str, float]:
        run = asyncio.create_task(pipeline.run())
        fps: dict[str, float] = {}
        for sid in ("a", "b"):
            await asyncio.to_thread(wait_until, lambda sid=sid: any(
                r.frame.stream_id == sid for r in list(sink.results)), 10.0, f"{sid} flowing")
        fps["b before"] = await asyncio.to_thread(rate, sink, "b", 3.0)
        servers["a"].kill()
        await asyncio.sleep(0.5)  # a's frames already in flight come out
        fps["a during"], fps["b during"] = await asyncio.gather(
            asyncio.to_thread(rate, sink, "a", 3.0), asyncio.to_thread(rate, sink, "b", 3.0))
        ready = await asyncio.to_thread(servers["a"].start)
        fps["a back after"] = await asyncio.to_thread(
            wait_until, lambda: sources[0].state == "up", 10.0, "a up again") - ready
        fps["a after"] = await asyncio.to_thread(rate, sink, "a", 1.5)
        assert not run.done(), "the pipeline must ride out the outage"
        for source in sources:
            source.close()
        await pipeline.stop(drain=True)
        await asyncio.wait_for(run, 15)
        return fps

    fps = asyncio.run(scenario())
    print(f"\nRTSP pipeline: {', '.join(f'{k} {v:.2f}' for k, v in fps.items())} "
          f"(fps; 'a back after' in s)")
    assert fps["b before"] >= 20  # the server sends 30 fps
    # generous: a 2-core machine shared with other work jitters by a few fps
    assert fps["b during"] >= 0.7 * fps["b before"]
    assert fps["a during"] < 1 and fps["a after"] >= 20
    assert fps["a back after"] <= COME_BACK_LIMIT_S
    assert [s.reconnects for s in sources] == [1, 0]
    for sid in ("a", "b"):
        outcomes = metrics.outcomes[sid]
        assert metrics.received[sid] == sum(outcomes.values()), dict(outcomes)
        assert outcomes["processed"] == sum(1 for r in sink.results if r.frame.stream_id == sid)
    assert metrics.registry.get_sample_value("vidpipe_stream_reconnects_total",
                                             {"stream": "a"}) == 1
    assert metrics.registry.get_sample_value("vidpipe_stream_up", {"stream": "b"}) == 0  # closed
    assert SECRET not in caplog.text
