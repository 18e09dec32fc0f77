"""Issue 17's stalled-camera check: ``python tests/soak/rtsp_stall.py`` (from the repo root).

8 RTSP cameras (real GStreamer servers, ``tests/rtsp_fixtures.py``) into one service, the SSD
detector saturated; each stream's processed fps for 10 s, then one camera's server is
SIGKILLed, and 10 s more: the others should keep (or take up) their share.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.service.config import ServiceConfig, StreamConfig  # noqa: E402
from app.service.service import Service  # noqa: E402
from pipelines.metrics import PipelineMetrics  # noqa: E402
from tests.rtsp_fixtures import RtspServers  # noqa: E402

IDS = [f"cam{k}" for k in range(8)]


async def window(metrics: PipelineMetrics, seconds: float) -> dict[str, float]:
    start = {s: metrics.outcomes[s]["processed"] for s in IDS}
    await asyncio.sleep(seconds)
    return {s: (metrics.outcomes[s]["processed"] - start[s]) / seconds for s in IDS}


async def main(servers: RtspServers) -> None:
    cams = [servers.start(path=f"/{sid}", size=(640, 360)) for sid in IDS]
    config = ServiceConfig(model="ssdlite-person", results_dir=Path(tempfile.mkdtemp()))
    service = Service(config, PipelineMetrics())
    async with service:
        for cam, sid in zip(cams, IDS, strict=True):
            await service.add_stream(StreamConfig(url=cam.url, id=sid))
        await asyncio.sleep(5)
        before = await window(service.metrics, 10)
        cams[0].kill()
        await asyncio.sleep(2)
        after = await window(service.metrics, 10)
        state = service.streams[IDS[0]].state
    others = IDS[1:]
    print("before:", {s: round(v, 1) for s, v in before.items()})
    print("after :", {s: round(v, 1) for s, v in after.items()}, f"{IDS[0]} {state}")
    print(f"the others' mean before {sum(before[s] for s in others) / 7:.2f}, after "
          f"{sum(after[s] for s in others) / 7:.2f}; all eight before "
          f"{min(before.values()):.1f}-{max(before.values()):.1f} around "
          f"{sum(before.values()) / 8:.2f}")


if __name__ == "__main__":
    with RtspServers() as servers:
        asyncio.run(main(servers))
