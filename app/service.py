"""The service: streams that share one detector per (model, device), and their lifetimes.

Streams are added and removed while others run. Every stream that uses a model on a device
feeds the same ``SharedDetector``: the model is loaded once, and the frames of all its streams
are batched together, each stream with its own queue and drop policy. Each stream's feed (its
source, decoder and preprocessor) is its own failure domain: a stream whose source dies is
marked ``failed`` and the others go on. A detector is unloaded when its last stream goes. All
share one metrics registry, which ``/metrics`` serves.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from app.config import AnalyticsUpdate, ServiceConfig, StreamConfig, analytics_config
from app.events.outputs import check_webhooks
from app.feed import FeedReaders
from app.results import StreamOutputs
from app.service_events import ServiceEvents
from app.streams import (
    SourceRejected,
    StreamRuntime,
    check_camera_host,
    check_stream_model,
    resolve_source,
)
from models.zoo import resolve_model
from pipelines.analytics.config import TrackerSettings
from pipelines.analytics.stream import StreamAnalytics
from pipelines.events.ring import PacketRing, RecordingSource
from pipelines.gpu_metrics import GpuSampler, gpu_sampler_for
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.shared import SharedDetector
from pipelines.sources.media import MEDIA_FORMATS
from pipelines.sources.paced import PacedFileSource
from pipelines.sources.url import redact, redact_text

log = logging.getLogger(__name__)


class StreamLimit(RuntimeError):
    """The service already runs ``max_streams`` streams (an HTTP 429)."""


class StreamExists(ValueError):
    """A stream with this id runs already (an HTTP 409)."""


class TrackerFixed(ValueError):
    """A running stream's tracker cannot change (an HTTP 409)."""


class Service:
    def __init__(self, config: ServiceConfig, metrics: PipelineMetrics,
                 instance: str | None = None) -> None:
        """``instance``: this process's name among several of one service (a cluster's
        worker); its event outputs say which they are."""
        self.config = config
        self.metrics = metrics
        self.streams: dict[str, StreamRuntime] = {}
        self.readers = FeedReaders()  # the API's event feed
        self._ids = itertools.count(1)
        self.ready = False
        self.detectors: dict[tuple[str, str], SharedDetector] = {}  # (model file, device)
        self._detector_tasks: dict[SharedDetector, asyncio.Task[None]] = {}
        self._detectors_lock = asyncio.Lock()
        self.events: ServiceEvents | None = None
        self.gpu: GpuSampler | None = None  # NVML's gauges of the service's GPU
        self.instance = instance

    async def start(self) -> None:
        """Open the event outputs, start the streams the config declares; a stream that
        fails to start is logged, not fatal (an event output that cannot open is)."""
        await asyncio.to_thread(check_webhooks, self.config.events.webhooks,
                                self.config.allowed_networks, self.config.allow_idn_hosts)
        self.gpu = await asyncio.to_thread(gpu_sampler_for, self.config.device,
                                           self.metrics.registry)
        loop = asyncio.get_running_loop()

        def on_event(event: dict[str, Any]) -> None:  # from the sink and media threads
            loop.call_soon_threadsafe(self.readers.emit, {"type": "event", "event": event})

        self.events = await asyncio.to_thread(ServiceEvents, self.config, self.metrics,
                                              on_event, self.instance)
        for stream in self.config.streams:
            try:
                await self.add_stream(stream)
            except (SourceRejected, StreamLimit, StreamExists, ValueError) as e:
                log.error("stream %s from the config not started: %s", redact(stream.url), e)
        self.ready = True

    async def add_stream(self, cfg: StreamConfig) -> StreamRuntime:
        if len(self.streams) >= self.config.max_streams:
            raise StreamLimit(f"the service runs {self.config.max_streams} streams, its limit")
        kind, target = resolve_source(cfg.url, self.config.media_roots)
        if kind == "rtsp":
            await asyncio.to_thread(check_camera_host, target, self.config.allowed_networks,
                                    self.config.allow_idn_hosts)
        stream_id = cfg.id or self._next_id()
        if stream_id in self.streams:
            raise StreamExists(f"stream {stream_id!r} exists already")
        model = (self.config.model if cfg.model is None
                 else check_stream_model(cfg.model, self.config.model_roots))
        analytics_config = cfg.analytics()
        model_path, spec = resolve_model(model)
        policy = cfg.policy or "drop_oldest"
        rt = StreamRuntime(stream_id, redact(cfg.url), kind, model, policy,
                           StreamOutputs.open(stream_id, spec, self.config))
        ring = self._events_for(rt, spec, tracked=analytics_config is not None)
        self.streams[stream_id] = rt
        detector: SharedDetector | None = None
        try:
            async with self._detectors_lock:
                detector = await self._detector(model, model_path, spec)
                source = await asyncio.to_thread(self._opener(rt, ring), target, stream_id)
                rt.detector = detector
                if analytics_config is not None:
                    rt.analytics = StreamAnalytics(stream_id, analytics_config, spec,
                                                   float(getattr(source, "fps", 0) or 30.0),
                                                   self.metrics)
                rt.pipeline = detector.attach(source, rt.outputs.sinks, policy, rt.analytics)
        except Exception:
            del self.streams[stream_id]
            rt.outputs.close()
            if detector is not None:
                await self._unload_if_idle(detector)
            raise
        rt.task = asyncio.create_task(self._run(rt), name=f"stream-{stream_id}")
        self.readers.emit({"type": "stream", "stream": rt.public()})
        log.info("stream %s added: %s (%s)", stream_id, rt.url, kind)
        return rt

    def _next_id(self) -> str:
        while (candidate := f"stream-{next(self._ids)}") in self.streams:
            pass
        return candidate

    async def _detector(self, model: str, model_path: Any, spec: Any) -> SharedDetector:
        """The detector of ``model`` on the service's device, loaded on first use."""
        key = (str(model_path), self.config.device)
        detector = self.detectors.get(key)
        if detector is not None and self._detector_tasks[detector].done():
            detector = None  # it failed: its streams are failed; new ones get a new one
        if detector is None:
            options = PipelineOptions.from_settings(self.config, capacity=2)
            detector = await asyncio.to_thread(SharedDetector.open, f"{model}@{key[1]}",
                                               model_path, spec, self.metrics, options)
            detector.on_state = lambda state, error: self._detector_state(detector, state,
                                                                          error)
            self.detectors[key] = detector
            self._detector_tasks[detector] = asyncio.create_task(
                self._run_detector(detector), name=f"detector-{detector.name}")
        return detector

    async def _run_detector(self, detector: SharedDetector) -> None:
        try:
            await detector.run()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # its streams fail; the service and the others go on
            error = redact_text(str(e))
            log.error("detector %s failed: %s", detector.name, error)
            for rt in list(self.streams.values()):
                if rt.detector is detector and rt.pipeline is not None:
                    rt.error = f"detector {detector.name} failed: {error}"
                    await rt.pipeline.stop(drain=False)

    async def _unload_if_idle(self, detector: SharedDetector) -> None:
        """Unload ``detector`` once no stream uses it."""
        async with self._detectors_lock:
            if detector.streams or detector not in self._detector_tasks:
                return
            self.detectors = {k: d for k, d in self.detectors.items() if d is not detector}
            task = self._detector_tasks.pop(detector)
            detector.close()
            try:
                await asyncio.wait_for(task, 5.0)
            except (TimeoutError, Exception):
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(detector.release)
            log.info("detector %s: no stream uses it; unloaded", detector.name)

    def _events_for(self, rt: StreamRuntime, spec: Any, tracked: bool) -> PacketRing | None:
        """The stream's EventSink among its outputs; its packet ring where clips are on and
        the stream is tracked from the start (one given a tracker later has no clips)."""
        assert self.events is not None, "the service has not started"
        ring = self.events.ring() if tracked else None

        def lost_s(_: str) -> float:
            track = rt.analytics.config.track if rt.analytics is not None else None
            return (track.lost_frames if track is not None else 30) / 30.0

        rt.outputs.events = self.events.sink(
            rt.id, spec, lambda _: float(getattr(rt.source, "fps", 0) or 30.0), lost_s, ring)
        return ring

    def _opener(self, rt: StreamRuntime,
                ring: PacketRing | None = None) -> Callable[[Any, str], Any]:
        # A source reports from its decode thread; the service's state lives on the loop.
        loop = asyncio.get_running_loop()

        def on_state(state: str) -> None:
            loop.call_soon_threadsafe(self._set_state, rt, state)

        def on_reconnect() -> None:
            loop.call_soon_threadsafe(self._count_reconnect, rt)

        def open_source(location: Any, sid: str) -> Any:
            if rt.kind == "file":
                rt.source = PacedFileSource(location, sid, loop=True, formats=MEDIA_FORMATS)
            else:
                from pipelines.sources.rtsp import RtspSource

                rt.source = RtspSource(location, sid, stall_timeout_s=self.config.stall_timeout_s,
                                       on_state=on_state, on_reconnect=on_reconnect)
            if ring is not None:  # its packets kept for clips
                rt.source = RecordingSource(rt.source, ring)
            return rt.source

        return open_source

    def _count_reconnect(self, rt: StreamRuntime) -> None:
        rt.reconnects += 1
        self.metrics.count_reconnect(rt.id)

    def _set_state(self, rt: StreamRuntime, state: str) -> None:
        rt.source_state = state
        self._show_state(rt)

    def _show_state(self, rt: StreamRuntime) -> None:
        shown = rt.source_state
        if rt.detector_restarting and shown == "up":
            shown = "restarting"
        rt.state = shown
        self.metrics.set_stream_up(rt.id, shown == "up")
        self.readers.emit({"type": "stream", "stream": rt.public()})

    def _detector_state(self, detector: SharedDetector, state: str, error: str | None) -> None:
        """A detector is being rebuilt (``restarting``) or is back (``up``): its streams show
        it, with the error that made it restart."""
        for rt in self.streams.values():
            if rt.detector is detector:
                rt.detector_restarting = state == "restarting"
                if state == "restarting":  # "failed": _run_detector says why
                    rt.error = f"detector {detector.name} restarting after: {error}"
                elif state == "up":
                    rt.error = None
                self._show_state(rt)

    async def _run(self, rt: StreamRuntime) -> None:
        assert rt.pipeline is not None and rt.detector is not None
        if rt.kind == "file":
            self._set_state(rt, "up")
        try:
            await rt.pipeline.run()
            self._set_state(rt, self._end_state(rt))
        except asyncio.CancelledError:
            self._set_state(rt, self._end_state(rt))
            raise
        except BaseException as e:  # a failed stream must not take the service down
            rt.error = redact_text(str(e.exceptions[0] if isinstance(e, BaseExceptionGroup)
                                       else e))
            log.error("stream %s failed: %s", rt.id, rt.error)
            self._set_state(rt, "failed")
        finally:  # what the feed put in is finished (or counted) before the stream goes,
            # and its outputs close after that, even if this task is cancelled meanwhile
            detach = asyncio.ensure_future(rt.detector.detach(rt.id))
            detach.add_done_callback(lambda _: rt.outputs.close())
            await asyncio.shield(detach)

    @staticmethod
    def _end_state(rt: StreamRuntime) -> str:
        return "failed" if rt.error and not rt.detector_restarting else "stopped"

    def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> StreamRuntime:
        """A stream's lines and zones from now on (and a tracker, for a stream without one);
        its tracker and detection interval are its own while it runs."""
        rt = self.streams[stream_id]
        current = rt.analytics
        if current is None:
            config = analytics_config(update.track, update.lines, update.zones)
            if config is None:
                return rt
            spec = rt.detector.spec
            fps = float(getattr(rt.source, "fps", 0) or 30.0)
            rt.analytics = StreamAnalytics(stream_id, config, spec, fps, self.metrics)
            rt.detector.analytics[stream_id] = rt.analytics
        else:
            kind = update.track.kind if isinstance(update.track, TrackerSettings) \
                else update.track
            if kind is not None and kind != current.config.track.kind:
                raise TrackerFixed(f"stream {stream_id!r} tracks with "
                                   f"{current.config.track.kind}: a running stream's tracker "
                                   "stays (remove and add the stream to change it)")
            config = analytics_config(current.config.track, update.lines, update.zones,
                                      current.config.detect_every)
            if config is not None:
                current.reconfigure(config)
        self.readers.emit({"type": "stream", "stream": rt.public()})
        log.info("stream %s: %d line(s), %d zone(s)", stream_id, len(update.lines),
                 len(update.zones))
        return rt

    async def remove_stream(self, stream_id: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
        """Drain and remove the stream; its final frame counts (``received``,
        ``outcomes``)."""
        rt = self.streams.pop(stream_id)
        await self._stop(rt, timeout_s)
        self.readers.emit({"type": "removed", "stream": rt.public()})
        log.info("stream %s removed", stream_id)
        return {"received": self.metrics.received[stream_id],
                "outcomes": dict(self.metrics.outcomes[stream_id])}

    async def _stop(self, rt: StreamRuntime, timeout_s: float) -> None:
        if rt.pipeline is not None:
            await rt.pipeline.stop(drain=True)  # closes the source: a waiting read ends
        if rt.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(rt.task), timeout_s)
            except TimeoutError:
                log.warning("stream %s did not drain in %.0f s; cancelling", rt.id, timeout_s)
                assert rt.pipeline is not None
                await rt.pipeline.stop(drain=False)
                await asyncio.gather(rt.task, return_exceptions=True)
        self.metrics.forget_stream(rt.id)
        if rt.detector is not None:
            await self._unload_if_idle(rt.detector)

    async def aclose(self, timeout_s: float = 8.0) -> None:
        """Drain every stream at once, within ``timeout_s`` in all."""
        self.ready = False
        streams = list(self.streams.values())
        self.streams.clear()
        start = time.monotonic()
        await asyncio.gather(*(self._stop(rt, timeout_s) for rt in streams),
                             return_exceptions=True)
        for detector in list(self._detector_tasks):
            await self._unload_if_idle(detector)
        if self.events is not None:
            await asyncio.to_thread(self.events.close)
        if self.gpu is not None:
            self.gpu.close()
        log.info("drained %d stream(s) in %.2f s", len(streams), time.monotonic() - start)

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
