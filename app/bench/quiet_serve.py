"""What quiet cameras cost the service, beside decoding the same frames alone.

``python -m app.bench.quiet_serve CAMERAS SECONDS ROUNDS [OUT.json]``: rounds of two rows,
alternated, each in a fresh process. ``service``: ``vidpipe serve``'s ``Service`` with CAMERAS
streams of the overhead bench's quiet 640x360@15 clip played as cameras (``motion: auto``,
ssdlite-person), the process's CPU over SECONDS after a warm-up, split by the engine's parts
(``ThreadClock``: decode, the event loop, ...). ``alone``: CAMERAS threads that each read the
same clip paced at its frame rate, looped, and decode it to YUV, nothing else: the same
frames at the same moments, so each decode finds its caches as cold as the service's does
(a loop decoding the file flat out keeps them warm, and costs less a frame).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.bench.overhead import quiet_clip
from app.bench.overhead_parts import ThreadClock
from app.bench.service import run_in_tree
from pipelines.decode.pyav import PyAVDecoder
from pipelines.sources.paced import PacedFileSource

WARM_UP_S = 8.0
START_SPREAD_S = 2.0  # cameras start apart over this, as their key frames are


def _row(frames: int, wall: float, cpu: float, parts: Mapping[str, float]) -> dict[str, Any]:
    return {"frames_per_s": round(frames / wall, 1), "cores": round(cpu / wall, 3),
            "cpu_ms_per_frame": round(cpu * 1e3 / max(1, frames), 3),
            "by_part_ms": {k: round(v * 1e3 / max(1, frames), 3) for k, v in parts.items()}}


async def service_row(cameras: int, seconds: float) -> dict[str, Any]:
    from app.malloc import limit_malloc_arenas
    from app.service.config import ServiceConfig, StreamConfig
    from app.service.service import Service
    from pipelines.metrics import PipelineMetrics

    limit_malloc_arenas()  # as vidpipe serve does
    clip = quiet_clip().resolve()
    with tempfile.TemporaryDirectory(prefix="vidpipe-quiet-serve-") as results:
        service = Service(ServiceConfig(media_roots=[clip.parent], results_dir=Path(results),
                                        state_dir=None), PipelineMetrics())
        await service.start()
        ids = [f"cam{k}" for k in range(cameras)]
        try:
            for sid in ids:
                await service.add_stream(StreamConfig.model_validate(
                    {"url": str(clip), "id": sid, "motion": "auto"}))
                await asyncio.sleep(START_SPREAD_S / cameras)
            await asyncio.sleep(WARM_UP_S)
            outcomes = service.metrics.outcomes
            before = sum(sum(outcomes[sid].values()) for sid in ids)
            skipped = sum(outcomes[sid].get("skipped_idle", 0) for sid in ids)
            cpu, wall = time.process_time(), time.monotonic()
            with ThreadClock() as clock:
                await asyncio.sleep(seconds)
            wall, cpu = time.monotonic() - wall, time.process_time() - cpu
            parts = clock.totals()
            frames = sum(sum(outcomes[sid].values()) for sid in ids) - before
            skipped = sum(outcomes[sid].get("skipped_idle", 0) for sid in ids) - skipped
        finally:
            await service.aclose()
    return {"row": "service", "cameras": cameras, **_row(frames, wall, cpu, parts),
            "skipped_in_window": skipped}


def alone_row(cameras: int, seconds: float) -> dict[str, Any]:
    """The clip paced and looped as the service's cameras are (``PacedFileSource``), decoded
    by the service's decoder (one thread, no motion, pictures left in YUV) and nothing else."""
    clip = quiet_clip()
    decoded = [0] * cameras
    sources = [PacedFileSource(clip, f"cam{k}", loop=True) for k in range(cameras)]

    def camera(k: int) -> None:
        time.sleep(k * START_SPREAD_S / cameras)
        decoder = PyAVDecoder(sources[k].video, threads=1, lazy=True)
        for packet in sources[k].packets():
            decoded[k] += len(decoder.decode(packet))

    threads = [threading.Thread(target=camera, args=(k,)) for k in range(cameras)]
    for t in threads:
        t.start()
    time.sleep(WARM_UP_S)
    before, cpu, wall = sum(decoded), time.process_time(), time.monotonic()
    time.sleep(seconds)
    frames = sum(decoded) - before
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    for source in sources:
        source.close()  # ends its reader's wait for the next packet
    for t in threads:
        t.join()
    return {"row": "alone", "cameras": cameras, **_row(frames, wall, cpu, {})}


def main(args: list[str]) -> None:
    if args[0] == "row":  # one row, in this fresh process
        kind, cameras, seconds = args[1], int(args[2]), float(args[3])
        row = asyncio.run(service_row(cameras, seconds)) if kind == "service" \
            else alone_row(cameras, seconds)
        print(json.dumps(row))
        return
    cameras, seconds, rounds = int(args[0]), float(args[1]), int(args[2])
    quiet_clip()  # made once, before any row is timed
    rows = []
    for k in range(rounds):
        pair = [run_in_tree(Path(__file__), ["row", kind, str(cameras), str(seconds)], None,
                            seconds + 120) for kind in ("alone", "service")]
        ratio = pair[1]["cpu_ms_per_frame"] / pair[0]["cpu_ms_per_frame"]
        print(f"round {k + 1}: alone {pair[0]['cpu_ms_per_frame']:.3f} ms a frame, service "
              f"{pair[1]['cpu_ms_per_frame']:.3f} ({ratio:.2f}x; "
              + ", ".join(f"{p} {ms:.3f}" for p, ms in pair[1]["by_part_ms"].items()) + ")")
        rows.extend(pair)
    if len(args) > 3:
        Path(args[3]).write_text(json.dumps({"cameras": cameras, "seconds": seconds,
                                             "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
