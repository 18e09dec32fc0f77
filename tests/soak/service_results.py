"""Issue 17's results check: ``python tests/soak/service_results.py [SECONDS] [MODEL]``.

`vidpipe serve` for SECONDS (default 600) with 4 copies of the camera-encoded demo clip
(``vidpipe bench --service`` makes it) played as cameras, results rotated at 1 MB. An SSE
reader of one stream (curl) stops reading and is killed halfway; the streams' fps are
measured for 30 s before and after. At the end each stream is removed (drained) and its JSON
lines are counted against ``vidpipe_frames_total{outcome="processed"}``. Prints the figures.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIP = REPO / "build/demo/clip-camera.mp4"
IDS = [f"cam{k}" for k in range(4)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def processed(base: str) -> dict[str, float]:
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'vidpipe_frames_total\{outcome="processed",stream="([^"]+)"\} ([0-9.e+]+)', text)}


def fps_over(base: str, seconds: float) -> dict[str, float]:
    before = processed(base)
    time.sleep(seconds)
    after = processed(base)
    return {s: (after.get(s, 0) - before.get(s, 0)) / seconds for s in IDS}


def main(seconds: float, model: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="vidpipe-soak-"))
    port = free_port()
    config = tmp / "service.yaml"
    config.write_text(json.dumps({
        "port": port, "model": model, "media_roots": [str(CLIP.parent)],
        "results_dir": str(tmp / "results"), "state_dir": str(tmp / "state"),
        "results_rotate_mb": 1,
        "streams": [{"url": str(CLIP), "id": s} for s in IDS]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDPIPE_")}
    base = f"http://127.0.0.1:{port}"
    with (tmp / "service.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config",
                                 str(config)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if all(processed(base).get(s, 0) > 0 for s in IDS):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        reader = subprocess.Popen(["curl", "-sN", f"{base}/api/streams/cam0/results"],
                                  stdout=subprocess.PIPE)
        time.sleep(max(0.0, seconds / 2 - 30))
        with_reader = fps_over(base, 30)
        assert reader.stdout is not None
        events = reader.stdout.read1(200_000).decode(errors="replace").count("event: result")
        reader.kill()
        reader.wait()
        time.sleep(5)
        without = fps_over(base, 30)
        time.sleep(max(0.0, seconds / 2 - 65))
        for s in IDS:
            urllib.request.urlopen(urllib.request.Request(f"{base}/api/streams/{s}",
                                                          method="DELETE"))
        final = processed(base)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    print(f"ran {seconds:.0f} s; the SSE reader took {events} result events, then stopped "
          "reading, and was killed")
    print("fps with the reader", {s: round(v, 1) for s, v in with_reader.items()})
    print("fps after its kill ", {s: round(v, 1) for s, v in without.items()})
    for s in IDS:
        files = sorted((tmp / "results" / s).iterdir())
        records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
        frames = [r["frame"] for r in records]
        print(f"{s}: {len(files)} files, {len(records)} lines, processed counter "
              f"{final.get(s, 0):.0f}, unique {len(set(frames)) == len(frames)}, "
              f"ordered {frames == sorted(frames)}")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 600.0,
         sys.argv[2] if len(sys.argv) > 2 else "models/zoo/shapes-yolo/model.pruned50.int8.onnx")
