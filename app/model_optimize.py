"""Pruning, quantization and the loss gate behind ``vidpipe model prune | quantize | optimize``.

Every variant is scored the same way as the FP32 model it comes from: the real pipeline over
the same clips, mAP by pycocotools. With labelled clips that is mAP against the labels; with
footage that has none it is *agreement* mAP against the FP32 model's own detections (see
``app.model_eval.reference_truth``). Speed is ONNX Runtime's median latency per image on this
machine, batch 1, measured for every variant in the same process, one after the other.

Variants live beside the FP32 model, named as ``models.zoo.variant_file`` says
(model.int8.onnx, model.pruned50.onnx, model.pruned50.int8.onnx), so ``vidpipe run --model
FOLDER/model.int8.onnx`` and ``vidpipe bench`` find them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from app.model_eval import ClipScores, reference_truth, score_against, score_clips
from models.data import boxes_path
from models.errors import ModelError
from models.evaluate import Accuracy, FrameTruth
from models.export import compare_latency, export_onnx
from models.quantize import METHODS, quantize_model
from models.spec import InputSpec, ModelSpec
from models.zoo import variant_file
from pipelines.frame import Frame
from pipelines.options import PipelineOptions
from pipelines.preprocess.opencv import OpenCVPreprocessor

Progress = Callable[[int, int | None], None]


class CalibrationError(ModelError):
    """The calibration video cannot be read, or gives too few frames."""


def calibration_frames(video: Path, spec: InputSpec, count: int = 64) -> np.ndarray:
    """``count`` frames spread over ``video``, preprocessed for the model: [N, C, H, W]."""
    try:
        with av.open(str(video)) as container:
            if not container.streams.video:
                raise CalibrationError(f"calibration video {video}: no video stream")
            stream = container.streams.video[0]
            total = stream.frames or 0
            every = max(1, total // count) if total else 1
            pictures = [f.to_ndarray(format="rgb24") for i, f in
                        enumerate(container.decode(stream)) if i % every == 0][:count]
    except (av.FFmpegError, OSError, UnicodeDecodeError) as e:
        raise CalibrationError(f"cannot read calibration video {video}: {e}") from e
    if len(pictures) < 2:
        raise CalibrationError(f"calibration video {video}: {len(pictures)} frame(s) decoded, "
                               f"need at least 2")
    prepare = OpenCVPreprocessor(spec)
    frames = [Frame("calibration", i, None, 0.0, torch.from_numpy(p))
              for i, p in enumerate(pictures)]
    return prepare.prepare_many(frames).tensor.numpy()


@dataclass(slots=True)
class Scorer:
    """Scores ONNX files of one model on fixed clips: against labels, or against the FP32
    model's detections where the clips have none."""

    spec: ModelSpec
    clips: list[Path]
    out: Path
    reference: Path  # the FP32 model
    on_progress: Progress | None = None
    _truths: dict[str, list[FrameTruth]] | None = field(default=None, init=False)

    @property
    def labelled(self) -> bool:
        return all(boxes_path(c).is_file() for c in self.clips)

    @property
    def kind(self) -> str:
        return "mAP against the clips' labels" if self.labelled else \
            "agreement mAP against the FP32 model's detections (no labels)"

    def score(self, model: Path, name: str) -> ClipScores:
        options = PipelineOptions(batch_size=4)
        if self.labelled:
            return score_clips(model, self.spec, self.clips, None, self.out / name,
                               options=options, on_progress=self.on_progress)
        if self._truths is None:
            self._truths = reference_truth((self.reference, self.spec), self.clips,
                                           self.out / "reference", options=options,
                                           on_progress=self.on_progress)
        return score_against(model, self.spec, self.clips, self._truths, self.out / name,
                             options=options, on_progress=self.on_progress)


@dataclass(slots=True)
class VariantRow:
    label: str
    file: str
    parameters: int
    gflops: float  # per image at the model's input size (2 x multiply-adds)
    accuracy: Accuracy
    latency_ms: float = 0.0  # ONNX Runtime median, batch 1, 1 thread (measure_latencies)
    latency_2t_ms: float = 0.0  # the same with 2 threads
    loss_points: float = 0.0  # (FP32 mAP@0.5 - this) x 100
    speedup: float = 1.0  # FP32 latency / this, 1 thread
    refused: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["accuracy"] = self.accuracy.as_dict()
        return row


def int8_name(model: Path) -> str:
    """model.onnx -> model.int8.onnx, model.pruned50.onnx -> model.pruned50.int8.onnx."""
    return model.name[:-len(".onnx")] + ".int8.onnx"


def measure_latencies(rows: list[VariantRow], folder: Path) -> list[VariantRow]:
    """Fill every row's ONNX Runtime latency (1 and 2 threads), all variants side by side
    in one interleaved measurement (``models.export.compare_latency``), so their speed-ups
    are ratios taken at the same moment, not times from minutes apart."""
    paths = [folder / r.file for r in rows]
    for threads, field_name in ((1, "latency_ms"), (2, "latency_2t_ms")):
        for row, ms in zip(rows, compare_latency(paths, threads=threads), strict=True):
            setattr(row, field_name, ms)
    return rows


def quantize_best(model: Path, frames: np.ndarray, scorer: Scorer, methods: Sequence[str],
                  say: Callable[[str], None],
                  ) -> tuple[Path, str, dict[str, ClipScores], dict[str, str]]:
    """Quantize ``model`` with each calibration method, score each, keep the most accurate
    (mAP@0.5, then mAP@0.5:0.95) as its ``.int8.onnx``; returns it, the method, the scores,
    and the methods that failed with why."""
    target = model.with_name(int8_name(model))
    scores: dict[str, ClipScores] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="vidpipe-int8-") as scratch:
        for method in methods:
            candidate = Path(scratch) / f"{method}.onnx"
            try:
                quantize_model(model, candidate, frames, method, on_progress=say)
            except ValueError as e:  # e.g. Entropy's histogram of a constant activation
                failed[method] = str(e).splitlines()[0][:100]
                say(f"{method}: calibration failed, skipped ({failed[method]})")
                continue
            scores[method] = scorer.score(candidate, f"{target.stem}-{method}")
            say(f"{method}: mAP@0.5 {scores[method].overall.map50:.4f}, "
                f"mAP@0.5:0.95 {scores[method].overall.map50_95:.4f}")
        if not scores:
            raise ModelError(f"{model.name}: every calibration method failed: "
                             f"{failed}")
        best = max(scores, key=lambda m: (scores[m].overall.map50, scores[m].overall.map50_95))
        shutil.copyfile(Path(scratch) / f"{best}.onnx", target)
    return target, best, scores, failed


def apply_gate(rows: list[VariantRow], max_loss: float) -> list[VariantRow]:
    """Fill loss and speed-up against the FP32 row (the first), mark rows over ``max_loss``."""
    base = rows[0]
    for row in rows:
        row.loss_points = round((base.accuracy.map50 - row.accuracy.map50) * 100, 2)
        row.speedup = round(base.latency_ms / row.latency_ms, 2)
        row.refused = row is not base and row.loss_points > max_loss
    return rows


def export_pruned(model: Any, folder: Path, ratio: float) -> Path:
    return export_onnx(model, folder / variant_file(ratio, int8=False))


def write_report(path: Path, rows: list[VariantRow], extra: dict[str, Any]) -> Path:
    path.write_text(json.dumps({**extra, "variants": [r.as_dict() for r in rows]}, indent=1,
                               default=str) + "\n")
    return path


__all__ = ["METHODS", "CalibrationError", "Scorer", "VariantRow", "apply_gate",
           "calibration_frames", "export_pruned", "int8_name", "measure_latencies", "quantize_best",
           "write_report"]
