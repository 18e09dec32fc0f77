"""One ``vidpipe model train`` run: train, export, score on held-out clips, write the card.

Every figure in the card's ``measured`` table comes from this run on this machine: training
wall time, held-out mAP from clips of another seed run through the real pipeline, and ONNX
Runtime latency. Nothing is typed in by hand.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from app.recipes.evaluate import ClipScores, score_clips
from models.checkpoint import save_checkpoint
from models.data import CLIP_SIZE, make_clip
from models.detector import count_parameters
from models.export import card_spec, export_onnx, measure_latency, write_card
from models.train import StepReport, TrainConfig, TrainResult, train


@dataclass(slots=True)
class TrainRun:
    config: TrainConfig
    out: Path
    name: str
    console: Console
    heldout: dict[str, Any] = field(default_factory=dict)

    def train(self, on_step: Callable[[StepReport], None],
              on_render: Callable[[int, int], None] | None = None) -> TrainResult:
        self.out.mkdir(parents=True, exist_ok=True)
        result = train(self.config, on_step, on_render=on_render)
        save_checkpoint(result.model, self.out / "model.pt", asdict(result.config))
        export_onnx(result.model, self.out / "model.onnx")
        return result

    def make_heldout(self, count: int, frames: int, seed: int) -> list[Path]:
        """Clips of ``seed`` (not the training seed) under OUT/heldout, made once."""
        folder = self.out / "heldout"
        folder.mkdir(parents=True, exist_ok=True)
        self.heldout = {"seed": seed, "clips": count, "frames_per_clip": frames,
                        "size": f"{CLIP_SIZE[0]}x{CLIP_SIZE[1]}"}
        with self.console.status(f"making {count} held-out clips (seed {seed})"):
            return [make_clip(folder / f"clip-{k}.mp4", seed=seed, clip=k, frames=frames)
                    for k in range(count)]

    def evaluate(self, clips: list[Path],
                 on_progress: Callable[[int, int | None], None]) -> ClipScores:
        spec = card_spec_for(self, None)
        write_card(spec, self.out / "card.yaml")  # the pipeline reads the model by its card
        return score_clips(self.out / "model.onnx", spec, clips, None, self.out / "heldout-run",
                           on_progress=on_progress)

    def finish(self, result: TrainResult, scores: ClipScores | None) -> list[Path]:
        """Measure latency, write train_log.json and the final card; the paths written."""
        log_path = self.out / "train_log.json"
        log_path.write_text(json.dumps(result.log(), indent=1) + "\n")
        measured = self.measured(result, scores)
        card = write_card(card_spec_for(self, result, measured), self.out / "card.yaml")
        return [self.out / "model.pt", self.out / "model.onnx", card, log_path]

    def measured(self, result: TrainResult, scores: ClipScores | None) -> dict[str, Any]:
        c = self.config
        onnx_path = self.out / "model.onnx"
        figures: dict[str, Any] = {
            "training": {
                "wall_minutes": round(result.wall_s / 60, 1),
                "cpu_minutes": round(result.cpu_s / 60, 1), "steps": result.steps_done,
                "batch_size": c.batch_size, "images": result.steps_done * c.batch_size,
                "stopped_early": result.stopped_early, "machine": machine(),
                "scenes": min(c.scenes, c.steps * c.batch_size),
                "command": (f"vidpipe model train --out {self.out} --seed {c.seed} --steps "
                            f"{c.steps} --batch-size {c.batch_size} --scenes {c.scenes} "
                            f"--activation "
                            f"{c.activation} --minutes {c.minutes:g}"),
            },
            "parameters": count_parameters(result.model),
            "file_mb": round(onnx_path.stat().st_size / 2**20, 2),
            "onnxruntime_fp32": measure_latency(onnx_path, batch=1, threads=c.threads),
        }
        if scores is not None:
            figures["heldout"] = {**self.heldout, "mAP@0.5": round(scores.overall.map50, 4),
                                  "mAP@0.5:0.95": round(scores.overall.map50_95, 4),
                                  "AP@0.5 per class": {k: round(v, 4) for k, v in
                                                       scores.overall.ap50_per_class.items()},
                                  "objects": scores.overall.objects,
                                  "scored_by": "vidpipe model evaluate (pipeline + pycocotools)"}
        return figures


def card_spec_for(run: TrainRun, result: TrainResult | None,
                  measured: dict[str, Any] | None = None) -> Any:
    from models.checkpoint import load_checkpoint

    model = result.model if result is not None else load_checkpoint(run.out / "model.pt")
    c = run.config
    return card_spec(
        model, run.name, measured=measured,
        description=(f"ShapesYOLO: anchor-free single-grid (stride 8) detector of "
                     f"{', '.join(model.config.class_names)} on cluttered synthetic scenes, "
                     f"{model.config.activation}, trained by vidpipe on the CPU. Output yolov8 "
                     f"[B, 4+C, N], no NMS inside."),
        provenance={"trained_by": "vidpipe model train (models/train.py)",
                    "data": f"models/data.py rendered scenes, training seed {c.seed}",
                    "network": model.config.to_dict()},
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()}" \
           f" threads"
