"""Issue 17's "flat over 10 minutes": ``python tests/soak/service_latency.py [STREAMS] [SECONDS]
[MODEL]``.

The service in-process with STREAMS (default 16) copies of the camera-encoded demo clip
(``vidpipe bench --service`` makes it) played as cameras, started 2 s/N apart; prints, for
each minute, the processed fps and the capture-to-result p50 and p99 over all streams, so a
latency that grows shows as a rising column.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from app.service.config import ServiceConfig, StreamConfig  # noqa: E402
from app.service.service import Service  # noqa: E402
from pipelines.metrics import PipelineMetrics  # noqa: E402

CLIP = Path(__file__).resolve().parents[2] / "build/demo/clip-camera.mp4"


async def main(streams: int, seconds: float, model: str) -> None:
    config = ServiceConfig(model=model, media_roots=[CLIP.parent],
                           results_dir=Path(tempfile.mkdtemp()))
    service = Service(config, PipelineMetrics())
    metrics = service.metrics
    ids = [f"cam{k}" for k in range(streams)]
    async with service:
        for sid in ids:
            await service.add_stream(StreamConfig(url=str(CLIP), id=sid))
            await asyncio.sleep(2.0 / streams)
        await asyncio.sleep(5)
        began = time.monotonic()
        print("minute  fps    p50 ms  p99 ms  stale/s")
        while time.monotonic() - began < seconds:
            start = {s: dict(metrics.outcomes[s]) for s in ids}
            await asyncio.sleep(60)
            done = sum(metrics.outcomes[s]["processed"] - start[s].get("processed", 0)
                       for s in ids)
            stale = sum(metrics.outcomes[s]["dropped_stale"] - start[s].get("dropped_stale", 0)
                        for s in ids)
            recent = np.concatenate([metrics.latency[s].values(60.0) for s in ids]) * 1000
            p50, p99 = np.percentile(recent, [50, 99]) if recent.size else (np.nan, np.nan)
            minute = round((time.monotonic() - began) / 60)
            print(f"{minute:>6}  {done / 60:5.1f}  {p50:6.0f}  {p99:6.0f}  {stale / 60:7.1f}",
                  flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 16,
                     float(sys.argv[2]) if len(sys.argv) > 2 else 600.0,
                     sys.argv[3] if len(sys.argv) > 3 else "ssdlite-person"))
