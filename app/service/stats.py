"""The figures ``GET /api/stats`` and the dashboard show, over a recent window."""

from __future__ import annotations

from dataclasses import asdict

from app.service.schemas import (
    ChannelFigures,
    DetectorFigures,
    GpuFigures,
    Headroom,
    Quantiles,
    StageFigures,
    Stats,
    Storage,
    StreamFigures,
    Usage,
)
from app.service.service import Service

FPS_WINDOW_S = 5.0  # a stream's fps: the frames of this many last seconds


def stats(service: Service, window_s: float = 60.0, worker: str | None = None) -> Stats:
    """``worker``: the name the streams, channels and detectors are shown with (a cluster's
    worker; None in one process)."""
    m = service.metrics
    stages = [StageFigures(stage=s.stage, threads=s.threads, items=s.items,
                           busy=round(s.busy, 4), work_ms=Quantiles(**s.work_ms),
                           wait_ms=Quantiles(**s.wait_ms))
              for s in m.stage_summaries(window_s=window_s)]
    channels = [ChannelFigures(name=name, depth=int(depth()), capacity=capacity,
                               worker=worker)
                for name, (depth, capacity) in m.channel_depths.items()]
    streams = []
    drops: dict[str, int] = {}
    for stream in service.streams.values():
        recent = m.latency[stream.id].values(window_s=FPS_WINDOW_S)
        outcomes = dict(m.outcomes[stream.id])
        streams.append(StreamFigures(
            **stream.view(worker).model_dump(), fps=round(recent.size / FPS_WINDOW_S, 2),
            latency_ms=Quantiles(**m.latency[stream.id].quantiles_ms(window_s)),
            outcomes=outcomes,
            received=m.received[stream.id], gaps=m.gaps.get(stream.id, (0, 0.0))[0],
            gap_s=round(m.gaps.get(stream.id, (0, 0.0))[1], 3)))
        for outcome, count in outcomes.items():  # skipped frames are results, not drops
            if outcome != "processed" and not outcome.startswith("skipped"):
                drops[outcome] = drops.get(outcome, 0) + count
    figures = Stats(window_s=window_s, stages=stages, channels=channels, streams=streams,
                    drops=drops,
                    batch_sizes={str(k): v for k, v in sorted(m.batch_sizes.items())},
                    detectors=[DetectorFigures(**d.describe(), worker=worker)
                               for d in service.detectors.loaded.values()])
    figures.storage = _storage(service)
    room = service.headroom.figures()
    figures.headroom = None if room is None else Headroom(**asdict(room))
    if service.gpu is not None:  # NVML, read now
        reading = service.gpu.read()
        figures.gpus = [GpuFigures(gpu=service.gpu.gpu_index,
                                   utilization=round(reading.utilization, 3),
                                   decoder_utilization=round(reading.decoder_utilization, 3),
                                   memory_used_bytes=reading.memory_used_bytes,
                                   worker=worker)]
    return figures


def _storage(service: Service) -> Storage | None:
    """What the service keeps on disk, as its Housekeeper last measured it."""
    keeper = service.housekeeper
    if keeper is None:
        return None
    return Storage(
        results=None if keeper.results is None else Usage(**asdict(keeper.results)),
        media=None if keeper.media_usage is None else Usage(**asdict(keeper.media_usage)),
        events_indexed=keeper.events_indexed, measured_at=keeper.measured_at)
