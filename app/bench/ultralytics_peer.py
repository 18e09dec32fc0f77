"""Ultralytics' ``predict(stream=True)`` over a clip, timed, as its users run it: run by the
runtime bench in Ultralytics' own interpreter (``python -P this-file MODEL CLIP FRAMES``), since
Ultralytics is a peer to compare with, never a vidpipe dependency. Imports nothing of vidpipe.

Its model is loaded and its predictor set up (one warm-up call) before the clock starts, as a
vidpipe run opens its model before its pipeline starts; then frames are read, prepared, run
(ONNX Runtime, Ultralytics' own session) and post-processed until FRAMES results (0: the whole
clip). Prints one JSON line: frames, wall and CPU seconds, and the detections per frame.
"""

from __future__ import annotations

import json
import sys
import time


def measure(model_path: str, clip: str, frames: int) -> dict:
    import numpy as np
    from ultralytics import YOLO

    model = YOLO(model_path, task="detect")
    model.predict(np.zeros((384, 640, 3), dtype=np.uint8), device="cpu", verbose=False)
    boxes: list[int] = []
    cpu0, t0 = time.process_time(), time.monotonic()
    for result in model.predict(clip, stream=True, device="cpu", verbose=False):
        boxes.append(len(result.boxes))
        if frames and len(boxes) >= frames:
            break
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    return {"frames": len(boxes), "wall_s": wall, "cpu_s": cpu,
            "fps": len(boxes) / wall if wall else 0.0, "boxes_per_frame": boxes}


if __name__ == "__main__":
    path, video, count = sys.argv[1:4]
    print(json.dumps(measure(path, video, int(count))))
