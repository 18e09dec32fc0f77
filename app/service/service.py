"""The service: streams that share one detector per (model, device), and their lifetimes.
Streams are added and removed while others run. Every stream that uses a model on a device
feeds the same ``SharedDetector`` (``app.service.detectors``): the model is loaded once, and
the frames of all its streams are batched together, each with its own queue and drop policy.
Each stream's intake (source, decoder) is its own failure domain. All share one metrics
registry (``/metrics``), one event feed (``/api/events``) and the machine's ``Headroom``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from app.errors import SourceRejected, StreamExists, StreamLimit, UnknownStream
from app.outputs.event_outputs import check_event_outputs
from app.service.analytics import update_analytics
from app.service.config import AnalyticsUpdate, ServiceConfig, StreamConfig
from app.service.detectors import Detectors
from app.service.event_feed import EventFeed
from app.service.events import ServiceEvents
from app.service.headroom import Headroom
from app.service.results import StreamOutputs
from app.service.retention import Housekeeper
from app.service.store import ServiceStore
from app.service.streams import (
    StreamState,
    admit,
    check_fits,
    check_stream_classifiers,
    check_stream_model,
    checked_source,
    model_of,
    on_loop,
    source_opener,
    start_recorder,
)
from pipelines.analytics.stream import StreamAnalytics
from pipelines.errors import ConfigError
from pipelines.events.ring import PacketRing
from pipelines.gpu_metrics import GpuSampler, gpu_sampler_for
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.shared.detector import SharedDetector
from pipelines.sources.url import redact, redact_text

log = logging.getLogger(__name__)


class Service:
    """The streams of one process, their shared detectors, event outputs and GPU gauges."""

    def __init__(self, config: ServiceConfig, metrics: PipelineMetrics,
                 instance: str | None = None, store: ServiceStore | None = None) -> None:
        """``instance``: this process's name among several of one service (a cluster's
        worker), which its event outputs say. ``store``: its events' index (default: memory)."""
        self.config, self.metrics, self.instance = config, metrics, instance
        self.store = store if store is not None else ServiceStore(None)
        self.streams: dict[str, StreamState] = {}
        self.feed = EventFeed()  # the API's event feed
        self._ids, self.ready = itertools.count(1), False
        self.detectors = Detectors(PipelineOptions.from_settings(config, capacity=2), metrics,
                                   on_failure=self._detector_failed,
                                   on_state=self._detector_state)
        self.events: ServiceEvents | None = None
        self.gpu: GpuSampler | None = None  # NVML's gauges of the service's GPU
        self.housekeeper: Housekeeper | None = None  # retention, and the storage it sees
        self.headroom = Headroom(lambda: sum(s.state == "up" for s in self.streams.values()))

    async def start(self) -> None:
        """Open the event outputs, start the streams the config declares; a stream that
        fails to start is logged, not fatal (an event output that cannot open is)."""
        c = self.config
        await asyncio.to_thread(check_event_outputs, c.events, c.allowed_networks,
                                c.allow_idn_hosts)
        self.gpu = await asyncio.to_thread(gpu_sampler_for, c.device, self.metrics.registry)
        loop = asyncio.get_running_loop()

        def on_event(event: dict[str, Any]) -> None:  # from the sink and media threads
            loop.call_soon_threadsafe(self.feed.emit, {"type": "event", "event": event})

        self.events = await asyncio.to_thread(ServiceEvents, self.config, self.metrics,
                                              on_event, self.store, self.instance)
        self.housekeeper = Housekeeper(c.results_dir, (c.results_retain_hours, c.results_retain_mb),
                                       self.events.store, self.store, c.events.retain_hours)
        self.housekeeper.start()
        self.headroom.start()
        for stream in self.config.streams:
            try:
                await self.add_stream(stream)
            except (SourceRejected, StreamLimit, StreamExists, ValueError) as e:
                log.error("stream %s from the config not started: %s", redact(stream.url), e)
        self.ready = True

    def stream(self, stream_id: str) -> StreamState:
        """The stream of ``stream_id``; UnknownStream (404) where there is none."""
        if (found := self.streams.get(stream_id)) is None:
            raise UnknownStream(f"no stream {stream_id!r}")
        return found

    async def add_stream(self, cfg: StreamConfig, *, check_headroom: bool = False
                         ) -> StreamState:  # check_headroom: OverCapacity past the headroom
        kind, target = await checked_source(cfg.url, self.config)
        record = None if cfg.record_url is None else await checked_source(cfg.record_url,
                                                                           self.config)
        stream_id = admit(cfg.id, self.streams, self.config.max_streams, self._ids)
        self.headroom.check(force=not check_headroom)
        model = (self.config.model if cfg.model is None
                 else check_stream_model(cfg.model, self.config.model_roots))
        if cfg.classifiers:
            cfg = cfg.model_copy(update={"classifiers": check_stream_classifiers(
                cfg.classifiers, self.config.model_roots)})
        analytics_config = cfg.analytics()
        model_path, spec = model_of(model, self.store)
        stream = StreamState(stream_id, redact(cfg.url), kind, model,
                             cfg.policy or "drop_oldest",
                             StreamOutputs.open(stream_id, spec, self.config),
                             config=cfg.model_copy(update={"id": stream_id}))
        assert self.events is not None, "the service has not started"
        ring = self.events.attach(stream, spec, tracked=analytics_config is not None)
        self.streams[stream_id] = stream
        self.metrics.restart_counts(stream_id)  # an id used before starts from zero
        self.metrics.set_stream_state(stream_id, stream.state)  # down until it is up
        try:
            await self._attach(stream, model, model_path, spec, target, ring, analytics_config,
                               record)
        except Exception:
            del self.streams[stream_id]
            stream.outputs.discard()
            if stream.detector is not None:
                await self.detectors.unload_if_idle(stream.detector)
            raise
        stream.task = asyncio.create_task(self._run(stream), name=f"stream-{stream_id}")
        self.feed.emit({"type": "stream", "stream": stream.shown()})
        log.info("stream %s added: %s (%s)", stream_id, stream.url, kind)
        return stream

    async def _attach(self, stream: StreamState, model: str, model_path: Any, spec: Any,
                      target: str, ring: PacketRing | None, analytics: Any,
                      record: tuple[Any, str] | None) -> None:
        """The stream's source opened and its intake attached to its model's detector; its
        ``record`` input, where it has one, feeds its clips (``ring``) in its place."""
        async with self.detectors.lock:
            stream.detector = await self.detectors.get(model, model_path, spec)
            source = await asyncio.to_thread(self._opener(stream, None if record else ring),
                                             target, stream.id)
            try:  # a file's size is known now (a camera's once it is up: _set_state); the
                # analytics made in a thread where classifiers may load their models
                check_fits(analytics, source, stream.id, stream.masks)
                make = partial(StreamAnalytics, stream.id, analytics, spec,
                               float(getattr(source, "fps", 0) or 30.0), self.metrics,
                               stream.detector.classifiers)
                stream.analytics = None if analytics is None else \
                    await asyncio.to_thread(make) if analytics.classifiers else make()
            except Exception:
                source.close()
                raise
            stream.pipeline = stream.detector.attach(source, stream.outputs.sinks,
                                                     stream.policy, stream.analytics)
            if record is not None and ring is not None:
                stream.recorder = start_recorder(stream, record, ring, self.config)

    async def _detector_failed(self, detector: SharedDetector, error: str) -> None:
        """A detector's budget of restarts is spent: its streams stop, failed, and say why."""
        for stream in list(self.streams.values()):
            if stream.detector is detector and stream.pipeline is not None:
                stream.error = f"detector {detector.name} failed: {error}"
                await stream.pipeline.stop(drain=False)

    def _opener(self, stream: StreamState,
                ring: PacketRing | None = None) -> Callable[[Any, str], Any]:
        # A source reports from its decode thread; the service's state lives on the loop.
        loop = asyncio.get_running_loop()
        return source_opener(stream, self.config, ring,
                             on_state=on_loop(loop, stream, self._set_state),
                             on_reconnect=on_loop(loop, stream, self._count_reconnect))

    def _count_reconnect(self, stream: StreamState) -> None:
        stream.reconnects += 1
        self.metrics.count_reconnect(stream.id)

    def _set_state(self, stream: StreamState, state: str) -> None:
        stream.source_state = state
        if state == "up" and stream.pipeline is not None:
            try:  # a camera's picture size is known now: its lines and zones must fit it
                check_fits(stream.analytics and stream.analytics.config, stream.source,
                           stream.id, stream.masks)
            except ConfigError as e:
                stream.error = str(e)
                log.error("%s", e)
                asyncio.ensure_future(stream.pipeline.stop(drain=False))
        self._show_state(stream)

    def _show_state(self, stream: StreamState) -> None:
        up = stream.source_state == "up"
        shown = "restarting" if stream.detector_restarting and up else stream.source_state
        stream.state = shown
        self.metrics.set_stream_state(stream.id, shown)
        self.feed.emit({"type": "stream", "stream": stream.shown()})

    def _detector_state(self, detector: SharedDetector, state: str, error: str | None) -> None:
        """A detector is being rebuilt (``restarting``, with why) or back (``up``): its streams
        show it."""
        for stream in self.streams.values():
            if stream.detector is detector:
                stream.detector_restarting = state == "restarting"
                if state == "restarting":  # "failed": _detector_failed says why
                    stream.error = f"detector {detector.name} restarting after: {error}"
                elif state == "up":
                    stream.error = None
                self._show_state(stream)

    async def _run(self, stream: StreamState) -> None:
        assert stream.pipeline is not None and stream.detector is not None
        if stream.kind == "file":
            self._set_state(stream, "up")
        try:
            await stream.pipeline.run()
            self._set_state(stream, stream.end_state)
        except asyncio.CancelledError:
            self._set_state(stream, stream.end_state)
            raise
        except BaseException as e:  # a failed stream must not take the service down
            stream.error = redact_text(str(e.exceptions[0] if isinstance(e, BaseExceptionGroup)
                                           else e))
            log.error("stream %s failed: %s", stream.id, stream.error)
            self._set_state(stream, "failed")
        finally:  # what the intake put in is finished (or counted) before the stream goes,
            # and its outputs close after that, even if this task is cancelled meanwhile
            detach = asyncio.ensure_future(stream.detector.detach(stream.id))
            detach.add_done_callback(lambda _: stream.outputs.close())
            await asyncio.shield(detach)


    def set_analytics(self, stream_id: str, update: AnalyticsUpdate) -> StreamState:
        """A stream's lines, zones and masks from now on (a tracker, for a stream without one);
        its tracker and detection interval are its own while it runs."""
        stream = self.stream(stream_id)
        if update_analytics(stream, update, self.metrics) and stream.config is not None:
            stream.config = update.applied_to(stream.config)
            self.feed.emit({"type": "stream", "stream": stream.shown()})
            log.info("stream %s: %d line(s), %d zone(s), %d mask(s)", stream_id,
                     len(update.lines), len(update.zones), len(update.masks))
        return stream

    async def remove_stream(self, stream_id: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
        """Drain and remove the stream; its final counts (``received``, ``outcomes``)."""
        stream = self.stream(stream_id)
        del self.streams[stream_id]
        await self._stop(stream, timeout_s)
        self.feed.emit({"type": "removed", "stream": stream.shown()})
        log.info("stream %s removed", stream_id)
        return {"received": self.metrics.received[stream_id],
                "outcomes": dict(self.metrics.outcomes[stream_id])}

    async def _stop(self, stream: StreamState, timeout_s: float) -> None:
        if stream.recorder is not None:
            await asyncio.to_thread(stream.recorder.close)
        if stream.pipeline is not None:
            await stream.pipeline.stop(drain=True)  # closes the source: a waiting read ends
        if stream.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(stream.task), timeout_s)
            except TimeoutError:
                log.warning("stream %s did not drain in %.0f s; cancelling", stream.id,
                            timeout_s)
                assert stream.pipeline is not None
                await stream.pipeline.stop(drain=False)
                await asyncio.gather(stream.task, return_exceptions=True)
        self.metrics.forget_stream(stream.id)
        if stream.detector is not None:
            await self.detectors.unload_if_idle(stream.detector)

    async def aclose(self, timeout_s: float = 8.0) -> None:
        """Drain every stream at once, within ``timeout_s`` in all."""
        self.ready = False
        streams = list(self.streams.values())
        self.streams.clear()
        start = time.monotonic()
        await asyncio.gather(*(self._stop(stream, timeout_s) for stream in streams),
                             return_exceptions=True)
        await self.detectors.aclose()
        await self.headroom.aclose()
        if self.housekeeper is not None:
            await self.housekeeper.aclose()
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
