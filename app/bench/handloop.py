"""The loop people write by hand, as the baseline every speed-up is measured against:
``cv2.VideoCapture`` -> letterbox -> ONNX Runtime -> box decoding and NMS, one thread, one frame
at a time. It uses vidpipe's own letterbox and decoding so that only the structure differs."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

from app.bench.measure import Measurement
from models.spec import ModelSpec
from pipelines.errors import SourceError
from pipelines.frame import Frame
from pipelines.postprocess.yolo import decode_outputs
from pipelines.preprocess.opencv import OpenCVPreprocessor


def measure_hand_loop(variant: str, path: Path, model_path: Path, spec: ModelSpec, *,
                      threads: int, frame_limit: int | None = None) -> Measurement:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    input_name = spec.input.name or session.get_inputs()[0].name
    output_names = [o.name for o in session.get_outputs()]
    prepare = OpenCVPreprocessor(spec.input).prepare
    size = (spec.input.width, spec.input.height)
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise SourceError(f"{path}: OpenCV cannot open it")
    latencies: list[float] = []
    cpu0, t0 = time.process_time(), time.monotonic()
    try:
        while frame_limit is None or len(latencies) < frame_limit:
            start = time.monotonic()
            ok, bgr = capture.read()
            if not ok:
                break
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            batch = prepare(Frame("hand", len(latencies), None, start, rgb))
            values = session.run(output_names, {input_name: batch.tensor})
            decode_outputs(dict(zip(output_names, values, strict=True)), batch.letterboxes,
                           spec.output, size, spec.num_classes)
            latencies.append(time.monotonic() - start)
    finally:
        capture.release()
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    return Measurement(variant, len(latencies), wall, cpu, np.array(latencies))
