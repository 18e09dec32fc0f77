"""Ultralytics' ``predict(stream=True)`` over a clip, timed, as its users run it: run by the
runtime and startup benches in Ultralytics' own interpreter (``python -P this-file MODE MODEL
CLIP FRAMES``), since Ultralytics is a peer to compare with, never a vidpipe dependency.
Imports nothing of vidpipe.

``stream`` (the runtime bench): the model is loaded and its predictor set up (one warm-up
call) before the clock starts, as a vidpipe run opens its model before its pipeline starts;
then frames are read, prepared, run (ONNX Runtime, Ultralytics' own session) and
post-processed until FRAMES results (0: the whole clip). ``whole`` (the startup bench): the
process as a user's script is, nothing warmed: it prints ``first`` as soon as the first result
is out (the parent times it), and every frame's boxes at the end. Both print one JSON line
last: frames, wall and CPU seconds, and the boxes.
"""

from __future__ import annotations

import json
import sys
import time


def measure(model_path: str, clip: str, frames: int, *, warm: bool = True) -> dict:
    import numpy as np
    from ultralytics import YOLO

    model = YOLO(model_path, task="detect")
    if warm:
        model.predict(np.zeros((384, 640, 3), dtype=np.uint8), device="cpu", verbose=False)
    boxes: list[int] = []
    found: list[list[list[float]]] = []
    cpu0, t0 = time.process_time(), time.monotonic()
    for result in model.predict(clip, stream=True, device="cpu", verbose=False):
        if not boxes and not warm:
            print("first", flush=True)
        boxes.append(len(result.boxes))
        found.append([[*map(float, b.xyxy[0]), float(b.conf[0]), int(b.cls[0])]
                      for b in result.boxes])
        if frames and len(boxes) >= frames:
            break
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    return {"frames": len(boxes), "wall_s": wall, "cpu_s": cpu,
            "fps": len(boxes) / wall if wall else 0.0, "boxes_per_frame": boxes,
            "detections": found}


if __name__ == "__main__":
    mode, path, video, count = sys.argv[1:5]
    print(json.dumps(measure(path, video, int(count), warm=mode == "stream")))
