"""Motion-gated detection: a frame with no motion outside the stream's masks, and no object
seen lately, skips the model (``Frame.skipped = "idle"``), except one every heartbeat.

Motion is measured on the decode thread, for every decoded frame, in one of two ways:

- ``vectors``: the codec's own motion vectors (FFmpeg's ``export_mvs``, H.264 and MPEG-4
  Part 2): the 16-pixel blocks the encoder moved at least ``VECTOR_MIN_PX`` (of a 640-wide
  picture; twice that at 1280), in patches of 3x3 blocks
  (a sensor's noise scatters small vectors over a still picture), as a share of the
  picture. Nearly free: the decoder computed them anyway. An intra frame has none (its
  motion is unknown: the frames around it tell).
- ``pixels``: a small grey picture (``THUMB_WIDTH`` wide, averaged down, so sensor noise
  averages out) against a running background (``BACKGROUND_RATE`` per frame, so a slow change
  of light is absorbed): the cells that differ by more than ``PIXEL_STEP`` grey levels.

``auto`` takes vectors where the decoder gives them, pixels otherwise (said once in the log).
A frame is moving when its moving share of the unmasked picture reaches ``MOVING_AREA``.
The constants were chosen on the capacity bench's scenes (docs/BENCHMARKS.md).

``MotionGate`` decides on the same thread, for each frame the picker offers the model: motion
on any frame since the last offered one or within ``MOTION_HOLD_S`` before it, an object seen
on a detected frame within the tracker's lost-track time (``watch``: a stopped object is
still detected), or the heartbeat due, and the frame goes to the model; otherwise it is
skipped, never dropped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from pipelines.analytics.config import MaskConfig, MotionMode
from pipelines.decode.picture import DecodedPicture
from pipelines.frame import host_array, is_tensor

log = logging.getLogger(__name__)

THUMB_WIDTH = 160  # the grey picture's width; its height keeps the picture's shape
PIXEL_STEP = 20.0  # grey levels from the background that count as a change
BACKGROUND_RATE = 0.05  # how much of each measured picture the background takes in
# a block moved at least this far is moving: 2 pixels of a 640-wide picture, as far in the
# picture's own scale at other sizes (a noisy 720p sensor's vectors reach 2-3 pixels)
VECTOR_MIN_PX = 2.0
VECTOR_WIDTH = 640
BLOCK = 16  # the grid (source pixels) moved blocks are counted on: H.264's macroblocks
# the least patch of moved blocks that is motion: 3x3 (an object about 48 pixels across, or
# more; a smaller one is the pixel meter's): a noisy sensor's vectors made 2x2 patches on
# 157 of 870 frames of a still scene, never a 3x3 one (docs/BENCHMARKS.md)
PATCH = np.ones((3, 3), np.uint8)
# the fewest moved blocks an opening by PATCH leaves any of: 2x2 in a corner (OpenCV's
# erosion takes the outside of the grid as moved)
FEWEST_IN_PATCH = 4
# a patch counts only near one of the frame before (NEAR blocks either way at 640 wide and
# 15 fps, more in proportion for a wider picture or a longer time between frames, MOST at
# most): an object moves on in patches frame after frame, where a bitrate-capped encoder's
# vectors on a flat sky came as one frame's patch now and then (5 a minute on a still
# 512 kbit/s sub-stream); it costs the first frame of a real motion (docs/BENCHMARKS.md)
NEAR, NEAR_FPS, MOST = 2, 15.0, 8
NO_VECTORS_AFTER = 5  # predicted frames in a row without vectors: the codec gives none
MOVING_AREA = 0.0005  # the least moving share of the unmasked picture that is motion
# after motion the model goes on seeing frames this long: an object that stops is still
# found while the tracker's news of it comes back through the pipeline (``watch``)
MOTION_HOLD_S = 1.0


@dataclass(frozen=True, slots=True)
class MotionSettings:
    """A stream's motion gating: ``mode`` (not "off"), the heartbeat, its masks now (they
    change while it runs) and ``watch``: until when (pts) an object seen on a detected frame
    may still be there (``StreamAnalytics.watch_until``)."""

    mode: MotionMode
    heartbeat_s: float
    masks: Callable[[], Sequence[MaskConfig]]
    watch: Callable[[], float]


@dataclass(slots=True)
class MotionInput:
    """What a decoder gives for measuring a picture's motion: its brightness (an (H, W)
    uint8 view, full size) and, when asked for, the codec's motion vectors (FFmpeg's
    AVMotionVector records; None: none came with this frame). ``key``: an intra frame, which
    has no vectors by nature."""

    luma: np.ndarray | None
    vectors: np.ndarray | None = None
    key: bool = False


class MotionMeter:
    """One stream's motion, measured on its decode thread. ``masks()`` gives the stream's
    masks now (they change while it runs); ``name`` names the stream in the log."""

    def __init__(self, mode: MotionMode, masks: Callable[[], Sequence[MaskConfig]],
                 name: str) -> None:
        if mode == "off":
            raise ValueError("a motion meter measures motion: mode 'off' needs none")
        self.mode: MotionMode = mode
        self.masks, self.name = masks, name
        self._background: np.ndarray | None = None
        self._kept: tuple[Any, tuple[int, int], np.ndarray] | None = None  # masks, size, cells
        self._without = 0  # predicted frames in a row that came without vectors
        self._patches: np.ndarray | None = None  # the last predicted frame's moved patches
        self._patches_at: float | None = None  # and its time (pts)
        self._none: np.ndarray | None = None  # a grid of no moved patch

    @property
    def wants_vectors(self) -> bool:
        return self.mode in ("auto", "vectors")

    def prepare(self, decoder: Any) -> None:
        """Ask a new decoder for what this meter reads, where it can give it (the CPU's:
        ``export_motion``; a decoder without gives its pictures, measured as pixels)."""
        export = getattr(decoder, "export_motion", None)
        if export is not None:
            export(self.wants_vectors)
        self._patches = None  # a new connection's frames follow nothing of the last one's

    def measure(self, picture: DecodedPicture) -> float | None:
        """The moving share of the unmasked picture (0..1), from what its decoder gave (or
        from its image, for a decoder that gives nothing); None when this picture cannot
        tell (the first, an intra frame)."""
        given: MotionInput | None = picture.motion
        if given is not None and given.luma is not None:
            size = (given.luma.shape[1], given.luma.shape[0])
        elif picture.image is not None:
            size = picture.source_size or (picture.image.shape[1], picture.image.shape[0])
        else:
            raise ValueError("motion needs the decoder's luma or the picture")
        if self.wants_vectors and given is not None:
            if given.vectors is not None:
                self._without = 0
                return self._vectors(size, given.vectors, picture.pts)
            if given.key:
                return None
            self._without += 1
            if self._without < NO_VECTORS_AFTER:
                return None  # a frame the encoder moved nothing in, or a codec without any
            self._no_vectors()
        if given is not None and given.luma is not None:
            return self._pixels(size, given.luma)
        return self._pixels(size, _luma(picture.image))

    def _no_vectors(self) -> None:
        """Predicted frames keep coming without vectors: this codec does not export them."""
        (log.warning if self.mode == "vectors" else log.info)(
            "%s: the decoder gives no motion vectors for this stream's codec: motion is "
            "measured on the pixels", self.name)
        self.mode = "pixels"

    def _cells(self, size: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
        """Which cells of a ``shape`` (rows, cols) grid over the picture count: 1 outside the
        masks, 0 inside (recomputed when the masks or the size change)."""
        masks = self.masks()
        if self._kept is not None and self._kept[0] is masks and self._kept[1] == size \
                and self._kept[2].shape == shape:
            return self._kept[2]
        cells = np.ones(shape, np.uint8)
        sx, sy = shape[1] / size[0], shape[0] / size[1]
        for mask in masks:
            points = np.array([(x * sx, y * sy) for x, y in mask.polygon], np.float32)
            cv2.fillPoly(cells, [np.round(points).astype(np.int32)], 0)
        self._kept = (masks, size, cells)
        return cells

    def _still(self, rows: int, cols: int) -> np.ndarray:
        """The grid of no moved patch (kept: it is only read)."""
        if self._none is None or self._none.shape != (rows, cols):
            self._none = np.zeros((rows, cols), np.uint8)
        return self._none

    def _pixels(self, size: tuple[int, int], luma: np.ndarray) -> float | None:
        width = THUMB_WIDTH
        height = max(1, round(width * luma.shape[0] / max(1, luma.shape[1])))
        thumb = cv2.resize(luma, (width, height), interpolation=cv2.INTER_AREA)
        thumb = thumb.astype(np.float32)
        background = self._background
        if background is None or background.shape != thumb.shape:
            self._background = thumb
            return None
        cells = self._cells(size, thumb.shape)
        moving = (cv2.absdiff(thumb, background) > PIXEL_STEP) & (cells > 0)
        cv2.accumulateWeighted(thumb, background, BACKGROUND_RATE)
        return float(moving.sum()) / max(1, int(cells.sum()))

    def _vectors(self, size: tuple[int, int], vectors: np.ndarray, pts: float | None) -> float:
        """The share of the unmasked 16-pixel blocks that moved, counting only those in a 3x3
        patch of moved blocks near one of the frame before (``NEAR``): a noisy sensor gives
        the encoder small vectors scattered over a still picture, an object a patch of them
        frame after frame."""
        rows, cols = (size[1] + BLOCK - 1) // BLOCK, (size[0] + BLOCK - 1) // BLOCK
        cells = self._cells(size, (rows, cols))
        if not len(vectors):
            self._patches = None
            return 0.0
        scale = np.maximum(vectors["motion_scale"].astype(np.float32), 1.0)
        least = VECTOR_MIN_PX * max(1.0, size[0] / VECTOR_WIDTH)
        moved = np.hypot(vectors["motion_x"], vectors["motion_y"]) / scale >= least
        if np.count_nonzero(moved) < FEWEST_IN_PATCH:  # no patch can survive the opening:
            self._patches, self._patches_at = self._still(rows, cols), pts  # a still scene's
            return 0.0  # sensor noise, most frames of a quiet camera, measured for less
        grid = np.zeros((rows, cols), np.uint8)
        grid[np.clip(vectors["dst_y"][moved] // BLOCK, 0, rows - 1),
             np.clip(vectors["dst_x"][moved] // BLOCK, 0, cols - 1)] = 1
        patches = cv2.morphologyEx(grid & cells, cv2.MORPH_OPEN, PATCH)
        before, self._patches = self._patches, patches
        since, self._patches_at = self._patches_at, pts
        if before is None or before.shape != patches.shape:
            return 0.0
        gap = 1.0 if pts is None or since is None else max(1.0, (pts - since) * NEAR_FPS)
        reach = min(MOST, math.ceil(NEAR * max(1.0, size[0] / VECTOR_WIDTH) * gap))
        near = cv2.dilate(before, np.ones((2 * reach + 1, 2 * reach + 1), np.uint8))
        confirmed = np.count_nonzero(np.logical_and(patches, near))
        return float(confirmed) / max(1, int(cells.sum()))


def _luma(image: Any) -> np.ndarray:
    """A picture's brightness, for a decoder that gives none: the green channel, every
    second pixel (a GPU picture is reduced there and only that crosses: unverified on a
    GPU)."""
    if is_tensor(image):
        return image[::2, ::2, 1].contiguous().cpu().numpy()
    return np.ascontiguousarray(host_array(image)[::2, ::2, 1])


class MotionGate:
    """Whether a frame the picker offers goes to the model. ``watch()`` is the stream's
    time (pts) until which an object seen on a detected frame may still be there."""

    def __init__(self, heartbeat_s: float, watch: Callable[[], float]) -> None:
        if heartbeat_s <= 0:
            raise ValueError(f"motion heartbeat must be > 0 s, got {heartbeat_s}")
        self.heartbeat_s = heartbeat_s
        self.watch = watch
        self._moved = 0.0  # the most motion of any frame since the last one offered
        self._moving_at = float("-inf")  # the pts of the last offered frame with motion
        self._detected: float | None = None  # the pts of the last frame sent to the model
        self.reasons: dict[str, int] = {"motion": 0, "objects": 0, "heartbeat": 0, "idle": 0}

    def note(self, motion: float | None) -> None:
        """A decoded frame's motion (None: it could not tell)."""
        if motion is not None and motion > self._moved:
            self._moved = motion

    def take(self, pts: float, step: float, *, news: bool = True) -> bool | None:
        """Whether the frame at ``pts`` (its interval ``step``) goes to the model. ``news``
        False: frames sent to the model may have seen objects that ``watch`` does not know
        of yet; a frame that nothing else sends is then left undecided (None, nothing
        changed), to be asked again once their results are in. ``watch`` only grows, so what
        it says already is what it will say (a file's frames are chosen alike however far its
        decoder runs ahead: ``FrameSelection``)."""
        moving_at = pts if self._moved >= MOVING_AREA else self._moving_at
        if pts - moving_at <= MOTION_HOLD_S:
            reason = "motion"
        elif pts <= self.watch():
            reason = "objects"
        elif self._detected is None or pts - self._detected >= self.heartbeat_s - step / 2:
            reason = "heartbeat"
        elif not news:
            return None
        else:
            reason = "idle"
        self._moved, self._moving_at = 0.0, moving_at
        self.reasons[reason] += 1
        if reason == "idle":
            return False
        self._detected = pts
        return True
