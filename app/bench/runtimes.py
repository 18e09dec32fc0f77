"""``vidpipe bench --runtimes``: ONNX Runtime against OpenVINO, per model variant, in one run.

1. The model alone: ms per frame under ONNX Runtime, OpenVINO and OpenVINO in bfloat16 at 1
   and all threads (one call at a time, batch 1, a blank input; ``CALLS`` calls a round,
   rounds taken in turn), medians over ``ROUNDS`` rounds.
2. Agreement: ``vidpipe model check --runtime R`` on the clip for ``auto`` (what ``vidpipe
   run`` does), ``openvino`` and ``openvino-bf16``: the pipeline against the model run
   directly by ONNX Runtime, frame by frame.
3. End to end on the clip, the runners interleaved within each rep: the hand loop (ONNX
   Runtime, the faster of 1 and all threads), ``vidpipe run`` with ``--runtime onnxruntime``,
   ``openvino``, ``openvino-bf16`` and ``auto``, and, for a model Ultralytics exported,
   Ultralytics' ``predict(stream=True)`` in its own interpreter (``ultralytics_python``),
   where given.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import onnx

from app.bench.handloop import measure_hand_loop
from app.bench.measure import CORES, measure_pipeline
from app.recipes.check import check_model
from models.backends.base import Backend
from models.backends.onnxruntime import OnnxRuntimeBackend
from models.backends.openvino import OpenVinoBackend
from models.spec import ModelSpec
from pipelines.options import PipelineOptions
from pipelines.threads import time_infer

ROUNDS = 7
CALLS = 5
CHECK_FRAMES = 150
PEER_TIMEOUT_S = 900.0
VIDPIPE_RUNTIMES = ("onnxruntime", "openvino", "openvino-bf16", "auto")
CHECKED = ("auto", "openvino", "openvino-bf16")


def model_alone(path: Path, spec: ModelSpec) -> list[dict[str, Any]]:
    """ms per frame of the model under each runtime, at 1 and all threads, interleaved."""
    rows = []
    for threads in sorted({1, CORES}):
        with OnnxRuntimeBackend(path, threads=threads) as ort, \
                OpenVinoBackend(path, threads=threads) as ov, \
                OpenVinoBackend(path, threads=threads, precision="bf16") as bf16:
            backends: dict[str, Backend] = {"onnxruntime": ort, "openvino": ov,
                                            "openvino_bf16": bf16}
            times: dict[str, list[float]] = {name: [] for name in backends}
            for _ in range(ROUNDS):
                for name, backend in backends.items():
                    times[name].append(time_infer(Path(), spec.input.image_shape,
                                                  spec.input.dtype, CALLS,
                                                  backend=backend).wall_ms)
            bf16_runs_in = bf16.precision
        medians = {name: statistics.median(t) for name, t in times.items()}
        rows.append({"threads": threads, **{f"{k}_ms": round(v, 2) for k, v in medians.items()},
                     "openvino_over_onnxruntime": round(medians["onnxruntime"]
                                                        / medians["openvino"], 3),
                     "openvino_bf16_over_onnxruntime": round(medians["onnxruntime"]
                                                             / medians["openvino_bf16"], 3),
                     "bf16_ran_in": bf16_runs_in})
    return rows


def agreement(path: Path, spec: ModelSpec, clip: Path, frames: int) -> dict[str, Any]:
    """``vidpipe model check --runtime R``'s figures on ``clip`` for each OpenVINO runtime."""
    keep = ("frames", "frame_agreement", "boxes_reference", "boxes_pipeline", "box_iou_min",
            "score_diff_max", "runtime")
    found = {}
    for runtime in CHECKED:
        report = check_model(path, spec, clip, PipelineOptions(runtime=runtime), frames=frames)
        found[runtime] = {k: report[k] for k in keep}
    return found


def exported_by_ultralytics(path: Path) -> bool:
    """Whether the ONNX carries Ultralytics' export metadata (its predictor needs it)."""
    graph = onnx.load(str(path), load_external_data=False)
    return any(p.key == "author" and "Ultralytics" in p.value for p in graph.metadata_props)


def run_ultralytics(python: Path, path: Path, clip: Path, frames: int | None) -> dict[str, Any]:
    """One run of Ultralytics' predictor in its own interpreter (``ultralytics_peer``)."""
    script = Path(__file__).with_name("ultralytics_peer.py")
    done = subprocess.run([str(python), "-P", str(script), "stream", str(path.resolve()),
                           str(clip.resolve()), str(frames or 0)], capture_output=True,
                          text=True, timeout=PEER_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Ultralytics' run failed: {done.stderr.strip()[-400:]}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def end_to_end(label: str, path: Path, spec: ModelSpec, clip: Path, *, reps: int,
               frames: int | None, ultralytics_python: Path | None,
               progress: Any = None) -> dict[str, Any]:
    """fps of each runner over ``reps`` interleaved reps; medians and ratios."""
    fps: dict[str, list[float]] = defaultdict(list)
    chosen: list[str] = []
    peer = ultralytics_python is not None and exported_by_ultralytics(path)
    for _ in range(reps):
        hands = [measure_hand_loop("hand", clip, path, spec, threads=t, frame_limit=frames)
                 for t in sorted({1, CORES})]
        fps["hand loop"].append(max(h.fps for h in hands))
        for runtime in VIDPIPE_RUNTIMES:
            options = PipelineOptions(runtime=runtime, frame_limit=frames)
            run = measure_pipeline(f"vidpipe {runtime}", [clip], path, spec, options)
            fps[f"vidpipe {runtime}"].append(run.fps)
            if runtime == "auto" and run.runtime is not None:
                chosen.append(run.runtime["runtime"])
        if peer:
            assert ultralytics_python is not None
            fps["ultralytics"].append(run_ultralytics(ultralytics_python, path, clip,
                                                      frames)["fps"])
        if progress is not None:
            progress()
    medians = {k: statistics.median(v) for k, v in fps.items()}
    row: dict[str, Any] = {"model": label, "file": path.name, "reps": reps,
                           "fps": {k: round(v, 2) for k, v in medians.items()},
                           "fps_each_rep": {k: [round(x, 2) for x in v] for k, v in fps.items()},
                           "auto_chose": chosen}
    row["auto_over_hand_loop"] = round(medians["vidpipe auto"] / medians["hand loop"], 3)
    if "ultralytics" in medians:
        row["auto_over_ultralytics"] = round(medians["vidpipe auto"] / medians["ultralytics"], 3)
    return row
