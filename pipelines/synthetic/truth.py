"""A generated clip's ground truth (``clip.truth.json``): one person / no-person label per
frame, and the shots they come from; what the acceptance check scores a detector against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def truth_path(clip: Path) -> Path:
    """Where a clip's ground truth lives: ``demo.mp4`` -> ``demo.truth.json``."""
    return Path(clip).with_suffix(".truth.json")


def load_truth(path: Path) -> dict[str, Any]:
    """Read a ground truth, given the clip or the truth file, and check that it hangs together."""
    path = Path(path)
    if not path.name.endswith(".truth.json"):
        path = truth_path(path)
    truth = json.loads(path.read_text())
    person, count = truth.get("person"), truth.get("frame_count")
    if not isinstance(person, list) or len(person) != count:
        got = len(person) if isinstance(person, list) else type(person).__name__
        raise ValueError(f"{path}: 'person' must hold one label per frame ({count}), got {got}")
    expected = 0
    for segment in truth["segments"]:
        if segment["first_frame"] != expected:
            raise ValueError(f"{path}: segment {segment} should start at frame {expected}")
        expected = segment["last_frame"] + 1
    if expected != count:
        raise ValueError(f"{path}: segments cover {expected} frames, frame_count is {count}")
    return truth
