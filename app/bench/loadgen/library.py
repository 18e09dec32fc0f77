"""SampleLibrary: LoadGen's query sample library — the decoded frames of a clip, held in
memory as RGB pictures, so a query costs what the system under test does with it and
nothing of decoding; and the clip's truth, where it has one, to score the answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from models.data import boxes_path
from models.spec import ModelSpec
from pipelines.errors import SourceError

MAX_SAMPLES = 256  # frames held (MLPerf's detection benchmarks hold 64)


class SampleLibrary:
    def __init__(self, clip: Path, limit: int = MAX_SAMPLES) -> None:
        capture = cv2.VideoCapture(str(clip))
        if not capture.isOpened():
            raise SourceError(f"{clip}: not a video OpenCV can open")
        self.clip = clip
        self.images: list[np.ndarray] = []
        try:
            while len(self.images) < limit:
                ok, bgr = capture.read()
                if not ok:
                    break
                self.images.append(np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)))
        finally:
            capture.release()
        if not self.images:
            raise SourceError(f"{clip}: no frame decoded")

    def __len__(self) -> int:
        return len(self.images)

    def truth(self, spec: ModelSpec) -> list[Any] | None:
        """The held frames' truth boxes (``read_truth``'s), or None: the clip has none."""
        path = boxes_path(self.clip)
        if not path.is_file():
            return None
        from app.recipes.evaluate import read_truth

        return read_truth(path, spec)[: len(self)]

    # LoadGen loads and unloads samples by index; they are all held already
    def load(self, indices: list[int]) -> None:
        pass

    def unload(self, indices: list[int]) -> None:
        pass
