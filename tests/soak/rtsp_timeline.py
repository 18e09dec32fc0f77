"""Real time across a camera's restarts: ``python tests/soak/rtsp_timeline.py [MINUTES]``.

One RTSP camera (a real GStreamer server, ``tests/rtsp_fixtures.py``) into the service for
MINUTES (default 10); its server is killed twice, a third and two thirds of the way, and
started again ``OUTAGE_S`` later. Every result line is read from the stream's live feed as it
is written, and the figures say: lines whose ``pts`` is null or not above the one before,
the largest distance between a line's ``time`` and the host's clock when it was read, and
the gaps the service counted (``/api/stats``'s ``gaps`` and ``gap_s``) against the outages.
``check()`` is what ``tests/app/test_realtime.py`` runs, shorter.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.service.config import ServiceConfig, StreamConfig  # noqa: E402
from app.service.service import Service  # noqa: E402
from app.service.stats import stats  # noqa: E402
from pipelines.metrics import PipelineMetrics  # noqa: E402
from tests.rtsp_fixtures import RtspServers  # noqa: E402

OUTAGE_S = 4.0


async def _read(service: Service, stream_id: str, lines: list[tuple[float, dict[str, Any]]],
                stop: asyncio.Event) -> None:
    feed = service.stream(stream_id).outputs.live.subscribe()
    while not stop.is_set():
        got = await feed.next(0.5)
        if got is None:
            return
        if got[0]:
            lines.append((time.time(), json.loads(got[0])))


async def check(servers: RtspServers, seconds: float, restarts: int = 2,
                outage_s: float = OUTAGE_S) -> dict[str, Any]:
    """Run the camera for ``seconds``, restarting its server ``restarts`` times."""
    server = servers.start(path="/cam", size=(320, 240))
    config = ServiceConfig(results_dir=Path(tempfile.mkdtemp(prefix="vidpipe-timeline-")))
    service = Service(config, PipelineMetrics())
    lines: list[tuple[float, dict[str, Any]]] = []
    stop = asyncio.Event()
    async with service:
        await service.add_stream(StreamConfig(url=server.url, id="cam"))
        reader = asyncio.create_task(_read(service, "cam", lines, stop))
        began = time.monotonic()
        for k in range(1, restarts + 1):
            await asyncio.sleep(max(0.0, began + k * seconds / (restarts + 1) - time.monotonic()))
            server.kill()
            await asyncio.sleep(outage_s)
            await asyncio.to_thread(server.start)
        await asyncio.sleep(max(0.0, began + seconds - time.monotonic()))
        figures = stats(service, 60.0).streams[0]
        stop.set()
        await reader
    pts = [line["pts"] for _, line in lines]
    skew = [abs(read - datetime.fromisoformat(line["time"]).timestamp()) for read, line in lines]
    return {
        "seconds": seconds, "restarts": restarts, "outage_s": outage_s, "lines": len(lines),
        "null_pts": sum(p is None for p in pts),
        "pts_not_increasing": sum(1 for a, b in zip(pts, pts[1:], strict=False)
                                  if a is None or b is None or b <= a),
        "max_time_skew_s": round(max(skew), 3) if skew else None,
        "gaps_counted": figures.gaps, "gap_s": figures.gap_s,
        "gaps_in_lines": [line["gap_s"] for _, line in lines if "gap_s" in line],
        "reconnects": figures.reconnects,
    }


def main() -> None:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    with RtspServers() as servers:
        print(json.dumps(asyncio.run(check(servers, 60 * minutes)), indent=1))


if __name__ == "__main__":
    main()
