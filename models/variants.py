"""The variant table of ``vidpipe model optimize``: one row per variant (FP32, INT8, pruned,
pruned + INT8) with its size, speed and accuracy, the loss gate, and where the table is kept
(optimize.json and the card's ``measured.variants``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from models.evaluate import Accuracy
from models.export import compare_latency, write_card
from models.spec import load_card


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


def apply_gate(rows: list[VariantRow], max_loss: float) -> list[VariantRow]:
    """Fill loss and speed-up against the FP32 row (the first), mark rows over ``max_loss``."""
    base = rows[0]
    for row in rows:
        row.loss_points = round((base.accuracy.map50 - row.accuracy.map50) * 100, 2)
        row.speedup = round(base.latency_ms / row.latency_ms, 2)
        row.refused = row is not base and row.loss_points > max_loss
    return rows


def write_report(path: Path, rows: list[VariantRow], extra: dict[str, Any]) -> Path:
    path.write_text(json.dumps({**extra, "variants": [r.as_dict() for r in rows]}, indent=1,
                               default=str) + "\n")
    return path


def record_variants(card_path: Path, rows: list[VariantRow], kind: str, clips: list[str],
                    method: str, calib: str, max_loss: float, flags: str = "") -> Path:
    """Write the measured table of the kept variants under ``measured.variants`` in the card."""
    spec = load_card(card_path)
    measured = dict(spec.measured)
    measured["variants"] = {
        "scored_by": kind, "clips": clips, "calibration": f"{method} on {calib}",
        "max_loss_points": max_loss,
        "latency": "ONNX Runtime median per image, batch 1, all variants side by side, on "
                   "the machine in training.machine",
        "command": f"vidpipe model optimize {card_path.parent} --calib {calib}{flags} "
                   f"--max-loss {max_loss:g}",
        "rows": {r.label: {"file": r.file, "parameters": r.parameters, "gflops": r.gflops,
                           "ms_1_thread": r.latency_ms, "ms_2_threads": r.latency_2t_ms,
                           "speedup": r.speedup, "mAP@0.5": round(r.accuracy.map50, 4),
                           "mAP@0.5:0.95": round(r.accuracy.map50_95, 4),
                           "loss_points": r.loss_points}
                 for r in rows if not r.refused},
    }
    return write_card(spec.model_copy(update={"measured": measured}), card_path)
