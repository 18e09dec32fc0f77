"""Issue 40's churn check against a real `vidpipe serve`:
``python tests/soak/service_churn.py [CYCLES] [IDLE_S] [WARMUP]`` (150, 60, 5; from the repo root).

Three tracked RTSP cameras (GStreamer's server, 640x360 at 15 fps) run with events (the
events file, snapshots and clips) while a fourth tracked camera is added through the API, run
until it has processed a frame and removed, CYCLES times after WARMUP cycles; then the service
idles IDLE_S seconds (its three cameras still running). The server's RSS (``/proc/PID/status``)
and open files (``/proc/PID/fd``) are printed at the start, after the warm-up, after the last
cycle and after the idle time, with the JSON of every figure on the last line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.rtsp_fixtures import RtspServers  # noqa: E402
from tests.soak.service_memory import (  # noqa: E402
    CAMERA,
    Server,
    add_run_remove,
    proc_status,
    serving,
)

KEPT = 3


def sample(server: Server) -> dict[str, float]:
    rss, threads = proc_status(server.proc.pid)
    return {"rss_mb": round(rss, 1), "threads": threads,
            "open_files": len(os.listdir(f"/proc/{server.proc.pid}/fd"))}


def churn(count: int, idle_s: float, warmup: int) -> None:
    with RtspServers() as servers:
        cams = [servers.start(path=f"/cam{k}", **CAMERA) for k in range(KEPT + 1)]
        streams: list[dict[str, object]] = [{"url": c.url, "id": f"cam{k}", "track": "bytetrack"}
                                            for k, c in enumerate(cams[:KEPT])]
        media = tempfile.mkdtemp(prefix="vidpipe-churn-media-")
        events = {"snapshots": True, "clips": {}, "media_dir": media}
        with serving(streams, events=events) as server:
            figures = {"start": sample(server)}
            began = time.monotonic()
            for k in range(warmup + count):
                if k == warmup:
                    figures["warm"] = sample(server)
                add_run_remove(server, {"url": cams[KEPT].url, "id": "cycled",
                                        "track": "bytetrack"}, k)
                if k >= warmup and (k - warmup + 1) % 50 == 0:
                    print(f"after {k - warmup + 1} cycles: {sample(server)}", flush=True)
            figures["cycled"] = sample(server)
            cycled_s = time.monotonic() - began
            time.sleep(idle_s)
            figures["idle"] = sample(server)
            figures["processed"] = {str(s["id"]): server.processed(str(s["id"])) for s in streams}
    for when in ("start", "warm", "cycled", "idle"):
        print(f"{when:>7}: {figures[when]}")
    change = {key: round(figures["idle"][key] - figures["warm"][key], 1)
              for key in ("rss_mb", "open_files", "threads")}
    print(f"{count} cycles in {cycled_s:.0f} s, then {idle_s:.0f} s idle: change from after "
          f"the warm-up {change}")
    print(json.dumps({"cycles": count, "warmup": warmup, "idle_s": idle_s, **figures,
                      "change": change}))


if __name__ == "__main__":
    args = sys.argv[1:]
    churn(int(args[0]) if args else 150, float(args[1]) if len(args) > 1 else 60.0,
          int(args[2]) if len(args) > 2 else 5)
