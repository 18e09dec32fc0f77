"""What the RTSP guard's relay costs: ``python tests/soak/rtsp_guard_cost.py [SECONDS] [ROUNDS]``
(20, 3; from the repo root).

A camera (GStreamer's server, ``tests/rtsp_fixtures.py``, its ``snow`` pattern: x264enc's
2 Mbit/s, as a busy camera) at 640x360@15 and at 1280x720@30 is read by an ``RtspSource``
for SECONDS, its packets demuxed but not decoded, through the guard (as vidpipe connects)
and straight (FFmpeg's own connection), interleaved ROUNDS times; printed: the process's CPU
per second of stream for each, and the difference.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipelines.sources.rtsp import RtspSource  # noqa: E402
from tests.rtsp_fixtures import RtspServers  # noqa: E402


class Straight(RtspSource):
    """FFmpeg's own connection: no relay (and no address policy)."""

    def _connect(self, options: dict[str, str]) -> Any:
        import av

        from pipelines.sources.media import METADATA_ERRORS

        return av.open(self._url, options=options, timeout=self.timeouts,
                       metadata_errors=METADATA_ERRORS)


def cpu_per_s(kind: type[RtspSource], url: str, seconds: float) -> tuple[float, int]:
    """The process's CPU seconds per second of reading, and the bytes read."""
    source = kind(url, "cost")
    source.connect()
    began, cpu, size = time.monotonic(), time.process_time(), 0
    for packet in source.packets():
        size += packet.size
        if time.monotonic() - began >= seconds:
            break
    used = (time.process_time() - cpu) / (time.monotonic() - began)
    source.close()
    return used, size


def main(seconds: float, rounds: int) -> None:
    rows = []
    with RtspServers() as servers:
        for size, fps in (((640, 360), 15), ((1280, 720), 30)):
            camera = servers.start(path=f"/cam{size[0]}", size=size, fps=fps, pattern="snow")
            taken: dict[str, list[float]] = {"guarded": [], "straight": []}
            rate = 0.0
            for _ in range(rounds):
                for name, kind in (("guarded", RtspSource), ("straight", Straight)):
                    used, read = cpu_per_s(kind, camera.url, seconds)
                    taken[name].append(used)
                    rate = read * 8 / seconds / 1000
            guarded = sum(taken["guarded"]) / rounds
            straight = sum(taken["straight"]) / rounds
            rows.append({"size": f"{size[0]}x{size[1]}@{fps}", "kbps": round(rate),
                         "guarded": guarded, "straight": straight,
                         "relay_share": guarded - straight})
            print(f"{rows[-1]['size']} ({rate:.0f} kbit/s): guarded {guarded:.2%} of a core, "
                  f"straight {straight:.2%}: the relay {guarded - straight:+.2%}", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(float(args[0]) if args else 20.0, int(args[1]) if len(args) > 1 else 3)
