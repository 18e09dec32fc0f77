"""``vidpipe bench --against REV`` (without ``--service``): ``vidpipe run``'s default path on
this code and on commit REV, side by side, per variant of the model.

Each run is a fresh process (``python -P this-file VARIANT MODEL CLIP FRAMES``) with the
code's own defaults (``PipelineOptions()``, plus the frame limit): what a user gets from
``vidpipe run`` on each. The other commit runs this same file with its tree's modules first
(a ``git worktree``, as ``--service --against`` does), and the order alternates each rep, so
that drift of a busy machine falls on both codes.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

RUN_TIMEOUT_S = 600.0


def compare_codes(model: str, clip: Path, variants: list[str], against: tuple[str, Path], *,
                  reps: int, frames: int | None) -> list[dict[str, Any]]:
    """Per variant, the median fps (and CPU per frame) of each code over ``reps`` runs."""
    from app.bench.service import run_in_tree  # not at the top: REV's tree runs this file

    label, tree = against
    rows = []
    for variant in variants:
        runs: dict[str, list[dict[str, Any]]] = {"this": [], label: []}
        for rep in range(reps):
            codes: list[tuple[str, Path | None]] = [("this", None), (label, tree)]
            if rep % 2:
                codes.reverse()
            for name, where in codes:
                args = [variant, model, str(clip.resolve()), str(frames or 0)]
                runs[name].append(run_in_tree(Path(__file__), args, where, RUN_TIMEOUT_S))
        this, other = (statistics.median(r["fps"] for r in runs[k]) for k in ("this", label))
        rows.append({"variant": variant, "fps_this": round(this, 1),
                     "fps_against": round(other, 1), "against": label,
                     "ratio": round(this / other, 3) if other else None,
                     "cpu_ms_per_frame_this": _median(runs["this"], "cpu_ms_per_frame"),
                     "cpu_ms_per_frame_against": _median(runs[label], "cpu_ms_per_frame"),
                     "runs": runs})
    return rows


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 2)


def measure_default(variant: str, model: str, clip: Path, frames: int) -> dict[str, Any]:
    """One run of the default pipeline over ``clip`` with this process's code (imported here,
    so that REV's modules are the ones found)."""
    from app.bench.measure import measure_pipeline
    from models.zoo import model_variants
    from pipelines.options import PipelineOptions

    path, spec = model_variants(model)[variant]
    options = PipelineOptions(frame_limit=frames) if frames else PipelineOptions()
    run = measure_pipeline(variant, [clip], path, spec, options)
    return {"variant": variant, "frames": run.frames, "fps": round(run.fps, 2),
            "cpu_ms_per_frame": round(1e3 * run.cpu_s / max(1, run.frames), 3),
            "busy": run.busy}


if __name__ == "__main__":
    name, model_name, where, count = sys.argv[1:5]
    print(json.dumps(measure_default(name, model_name, Path(where), int(count))))
