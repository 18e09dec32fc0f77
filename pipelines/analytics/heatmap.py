"""Heatmap: where a stream's tracked objects were — the anchors (bottom-centres) of its
confirmed tracks, frame by frame, counted in cells of ``CELL`` source pixels: a cell's count
is the frames objects spent there, summed over the objects.

``picture`` draws it over a picture of the scene (or grey), the counts on a log scale so a
path walked once still shows beside a spot where people stand for minutes; cells never
visited are left clear. Counting is O(boxes) a frame; drawing happens only when asked.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np

CELL = 8  # source pixels a side
MAX_SIDE = 16_384  # source pixels: anchors beyond (a stray box) are not counted


class Heatmap:
    def __init__(self, cell: int = CELL) -> None:
        self.cell = cell
        self._counts = np.zeros((0, 0), np.float64)  # grows to the farthest anchor seen
        self._lock = threading.Lock()  # added to on the analytics thread, drawn elsewhere

    @property
    def frames(self) -> float:
        """Object-frames counted (each tracked object on each frame is one)."""
        return float(self._counts.sum())

    def add(self, points: np.ndarray) -> None:
        """One frame's anchors, (N, 2) source pixels."""
        if not len(points):
            return
        cells = np.floor(np.asarray(points, np.float64) / self.cell).astype(np.int64)
        cells = cells[((cells >= 0) & (cells < MAX_SIDE // self.cell)).all(axis=1)]
        if not len(cells):
            return
        rows, cols = cells[:, 1], cells[:, 0]
        with self._lock:
            need = (int(rows.max()) + 1, int(cols.max()) + 1)
            have = self._counts.shape
            if need[0] > have[0] or need[1] > have[1]:
                grown = np.zeros((max(need[0], have[0]), max(need[1], have[1])))
                grown[:have[0], :have[1]] = self._counts
                self._counts = grown
            np.add.at(self._counts, (rows, cols), 1.0)

    def picture(self, background: np.ndarray | None = None,
                size: tuple[int, int] | None = None) -> np.ndarray:
        """An RGB picture: the counts coloured (blue few, red many) over ``background``
        (RGB, its size) or grey of ``size`` (width, height; default: the cells' extent)."""
        with self._lock:
            counts = self._counts.copy()
        if background is not None:
            base = np.asarray(background, np.uint8)
        else:
            width, height = size or (counts.shape[1] * self.cell, counts.shape[0] * self.cell)
            base = np.full((max(height, 1), max(width, 1), 3), 96, np.uint8)
        height, width = base.shape[:2]
        grid = np.zeros((-(-height // self.cell), -(-width // self.cell)))
        rows, cols = min(grid.shape[0], counts.shape[0]), min(grid.shape[1], counts.shape[1])
        grid[:rows, :cols] = counts[:rows, :cols]
        heat = np.log1p(grid)
        top = float(heat.max())
        scaled = np.zeros_like(heat, np.uint8) if top <= 0 else \
            np.round(255 * heat / top).astype(np.uint8)
        big = cv2.resize(scaled, (grid.shape[1] * self.cell, grid.shape[0] * self.cell),
                         interpolation=cv2.INTER_NEAREST)[:height, :width]
        visited = cv2.resize((grid > 0).astype(np.uint8), big.shape[::-1],
                             interpolation=cv2.INTER_NEAREST)[:height, :width].astype(bool)
        colours = cv2.cvtColor(cv2.applyColorMap(big, cv2.COLORMAP_JET), cv2.COLOR_BGR2RGB)
        dimmed = (base.astype(np.float32) * 0.55).astype(np.uint8)
        out = dimmed.copy()
        out[visited] = (0.35 * dimmed[visited] + 0.65 * colours[visited]).astype(np.uint8)
        return out

    def png(self, background: np.ndarray | None = None,
            size: tuple[int, int] | None = None) -> bytes:
        ok, data = cv2.imencode(".png", cv2.cvtColor(self.picture(background, size),
                                                     cv2.COLOR_RGB2BGR))
        if not ok:
            raise RuntimeError("OpenCV could not encode the heatmap as PNG")
        return data.tobytes()
