"""Pruning, quantization and the loss gate behind ``vidpipe model prune | quantize | optimize``.

Every variant is scored the same way as the FP32 model it comes from: the real pipeline over
the same clips, mAP by pycocotools. With labelled clips that is mAP against the labels; with
footage that has none it is *agreement* mAP against the FP32 model's own detections (see
``app.recipes.evaluate.reference_truth``). Speed is ONNX Runtime's median latency per image on this
machine, batch 1, measured for every variant in the same process, one after the other.

Variants live beside the FP32 model, named as ``models.zoo.variant_file`` says
(model.int8.onnx, model.pruned50.onnx, model.pruned50.int8.onnx), so ``vidpipe run --model
FOLDER/model.int8.onnx`` and ``vidpipe bench`` find them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np

from app.recipes.evaluate import ClipScores, reference_truth, score_against, score_clips
from models.data import boxes_path
from models.detector import count_parameters
from models.errors import ModelError
from models.evaluate import FrameTruth
from models.export import export_onnx
from models.prune import count_macs
from models.quantize import METHODS, quantize_model
from models.spec import InputSpec, ModelSpec
from models.variants import VariantRow, int8_name, measure_latencies
from models.zoo import variant_file
from pipelines.frame import Frame, host_array
from pipelines.options import PipelineOptions
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.sources.media import METADATA_ERRORS

Progress = Callable[[int, int | None], None]


class CalibrationError(ModelError):
    """The calibration video cannot be read, or gives too few frames."""


def calibration_frames(video: Path, spec: InputSpec, count: int = 64) -> np.ndarray:
    """``count`` frames spread over ``video``, preprocessed for the model: [N, C, H, W]."""
    try:
        with av.open(str(video), metadata_errors=METADATA_ERRORS) as container:
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
    frames = [Frame("calibration", i, None, 0.0, p)
              for i, p in enumerate(pictures)]
    return host_array(prepare.prepare_many(frames).tensor)


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


def export_pruned(model: Any, folder: Path, ratio: float) -> Path:
    return export_onnx(model, folder / variant_file(ratio, int8=False))


@dataclass(slots=True)
class Optimised:
    """What ``optimise_variants`` made: a row per variant, the calibration method kept, and
    what every method scored, per variant."""

    rows: list[VariantRow]
    method: str
    methods: dict[str, Any]


PruneOne = Callable[[float, Any], tuple[Path, Any]]  # (ratio, start) -> its .onnx, PruneResult
Bar = Callable[[str], AbstractContextManager[Any]]  # a progress bar, titled; has .update


def optimise_variants(model_path: Path, network: Any, calibration: np.ndarray, scorer: Scorer,
                      ratios: Sequence[float], prune_one: PruneOne, bar: Bar,
                      say: Callable[[str], None]) -> Optimised:
    """FP32 scored, INT8 by every calibration method (the best kept), then each ratio pruned
    (each after the first on from the one before), scored, and quantized by that method;
    finally every variant timed side by side."""
    rows: list[VariantRow] = []

    def scored(title: str, work: Callable[..., Any], *args: Any) -> Any:
        with bar(title) as progress:
            scorer.on_progress = progress.update
            return work(*args)

    def record(label: str, path: Path, torch_model: Any, scores: ClipScores) -> None:
        rows.append(VariantRow(label, path.name, count_parameters(torch_model),
                               round(2 * count_macs(torch_model) / 1e9, 3), scores.overall))

    record("fp32", model_path, network, scored("scoring fp32", scorer.score, model_path, "fp32"))
    int8, best, tried, failed = scored("quantizing fp32", quantize_best, model_path,
                                       calibration, scorer, METHODS, say)
    methods: dict[str, Any] = {"fp32": {**{m: s.overall.as_dict() for m, s in tried.items()},
                                        **{m: {"failed": why} for m, why in failed.items()}}}
    record("int8", int8, network, tried[best])
    start = None
    for ratio in sorted(set(ratios)):
        pruned_path, result = prune_one(ratio, start)
        start = result.model
        label = f"pruned{round(ratio * 100)}"
        record(label, pruned_path, result.model,
               scored(f"scoring {label}", scorer.score, pruned_path, label))
        q_path, q_best, q_tried, _ = scored(f"quantizing {label}", quantize_best, pruned_path,
                                            calibration, scorer, [best], say)
        methods[label] = {m: s.overall.as_dict() for m, s in q_tried.items()}
        record(f"{label}+int8", q_path, result.model, q_tried[q_best])
    say(f"timing {len(rows)} variants side by side (ONNX Runtime, 1 and 2 threads)")
    measure_latencies(rows, model_path.parent)
    return Optimised(rows, best, methods)
