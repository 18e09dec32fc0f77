"""The types that flow through a pipeline: Frame -> Batch -> Detections -> Result (a decoder's
``DecodedPicture`` becomes a Frame: ``pipelines.decode.picture``), the same on every device.
Small dataclasses that check their own shapes: a backend that returns the wrong thing fails
where it returns it, with a message that says what was expected.

A picture or a batch tensor is an array in the memory of the device that made it: a numpy
array on the host, a torch tensor on a GPU. Both have ``shape``, ``ndim`` and ``dtype``, and
this module is the one place that tells them apart, so the CPU path never imports torch: a
torch tensor can only exist where something imported torch already.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, cast

import numpy as np

from pipelines.geometry import Letterbox

if TYPE_CHECKING:
    import torch

    from pipelines.sinks.quiet import SkippedRun

# (H, W, 3) uint8 RGB, or a batch (4-D): numpy on the host, torch on a device
Picture: TypeAlias = "np.ndarray | torch.Tensor"


def is_tensor(array: Any) -> TypeGuard[torch.Tensor]:
    """Whether ``array`` is a torch tensor (of any device), without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(array, torch.Tensor)


def on_device(array: Any) -> TypeGuard[torch.Tensor]:
    """Whether ``array`` lives in a GPU's memory (a torch tensor not on the CPU)."""
    return is_tensor(array) and array.device.type != "cpu"


def tensor_of(array: Any, what: str = "Batch.tensor") -> torch.Tensor:
    """``array`` as the torch tensor a device stage needs; TypeError if it is not one."""
    if not is_tensor(array):
        raise TypeError(f"{what} must be a torch tensor here, got {type(array).__name__}")
    return array


def host_array(array: Any, what: str = "picture") -> np.ndarray:
    """``array`` as numpy, without a copy: a numpy array as it is, a CPU torch tensor viewed.
    A GPU tensor is a ValueError: copying it to the host is its stage's decision (it must wait
    for the tensor's CUDA event first)."""
    if isinstance(array, np.ndarray):
        return array
    if is_tensor(array):
        if array.device.type != "cpu":
            raise ValueError(f"{what} is on {array.device}; it must be on the host here")
        return array.numpy()
    raise TypeError(f"{what} must be a numpy array (or a torch tensor on a GPU), got "
                    f"{type(array).__name__}")


def copied_to_host(array: Any) -> np.ndarray:
    """``array`` as numpy, a device tensor copied to the host (waiting for the device)."""
    if on_device(array):
        return array.detach().cpu().numpy()
    return host_array(array)


@dataclass(slots=True)
class Frame:
    """One decoded picture of one stream. ``image`` is HWC uint8 RGB on the device of the
    stage that made it (``Picture``: the decoder's numpy array on the CPU, a torch tensor on
    a GPU); ``None`` once a stage has released the pixels and only the metadata travels on.
    ``ready`` is the CUDA event that marks the image as written, or None.
    ``timings`` collects the seconds each stage spent on the frame (a batched stage: its batch).
    ``source_size`` is the (width, height) the picture was decoded at when the decoder already
    shrank ``image`` to the model's letterbox (``ScaleTo``); None when ``image`` is full size.
    Boxes are always in source pixels: ``size``.
    """

    stream_id: str
    index: int
    pts: float | None
    captured_at: float
    image: Picture | None
    ready: Any = None
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds spent on it
    source_size: tuple[int, int] | None = None
    load: Callable[[], Picture] | None = None  # makes ``image`` (DecodedPicture.load)
    # frames before this one the model does not see (--detect-every N), which travel with it
    riders: list[Frame] = field(default_factory=list)
    gap_s: float | None = None  # the first frame after a camera was away: for how long
    skipped: str | None = None  # why the model does not see it ("idle"): it flows on, no boxes
    model: str | None = None  # the model file that saw it (a shared detector's: promotions)

    def materialize(self) -> None:
        """Make ``image`` now if it was left to be made (``load``); the preparing stage calls
        it, on its own thread, for the frames it prepares."""
        if self.load is not None:
            load, self.load = self.load, None
            self.image = load()
            self._check_image()

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"frame index must be >= 0, got {self.index}")
        if self.source_size is not None and (len(self.source_size) != 2
                                             or min(self.source_size) <= 0):
            raise ValueError(f"Frame.source_size must be (width, height) > 0, got "
                             f"{self.source_size}")
        self._check_image()

    def _check_image(self) -> None:
        image = self.image
        if image is None:
            return
        if not (isinstance(image, np.ndarray) or is_tensor(image)):
            raise TypeError(f"Frame.image must be a numpy array (or a torch tensor on a GPU), "
                            f"got {type(image).__name__}")
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"Frame.image must be (H, W, 3), got {tuple(image.shape)}")
        if str(image.dtype).removeprefix("torch.") != "uint8":
            raise ValueError(f"Frame.image must be uint8, got {image.dtype}")

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the picture as decoded, in the source pixels boxes refer to."""
        return self.source_size if self.source_size is not None else self.image_size

    @property
    def image_size(self) -> tuple[int, int]:
        """(width, height) of ``image``: ``size`` unless the decoder scaled it."""
        if self.image is None:
            raise ValueError(f"frame {self.stream_id}#{self.index} no longer holds its image")
        return int(self.image.shape[1]), int(self.image.shape[0])

    @property
    def scaled(self) -> bool:
        """Whether ``image`` is smaller or larger than the source picture."""
        return self.source_size is not None and self.image_size != self.source_size

    def without_image(self) -> Frame:
        """The same frame's metadata, with the pixels released (its riders' too)."""
        return _copy(self, image=None, ready=None, load=None,
                     riders=[r.without_image() for r in self.riders])

    def without_riders(self) -> Frame:
        """The same frame, its riders taken off (they go on as results of their own)."""
        return _copy(self, riders=[])

    def with_riders(self) -> list[Frame]:
        """Its riders, then itself: every frame it stands for, in order."""
        return [*self.riders, self]


_FRAME_FIELDS = tuple(f.name for f in dataclasses.fields(Frame))


def _copy(frame: Frame, **changes: Any) -> Frame:
    """``frame`` with ``changes`` (no picture, or no riders), not checked again: what was
    checked when it was made still holds (``dataclasses.replace`` checked again: 3x the cost)."""
    copy = object.__new__(Frame)
    for name in _FRAME_FIELDS:
        setattr(copy, name, changes[name] if name in changes else getattr(frame, name))
    return copy


@dataclass(slots=True)
class Batch:
    """Frames prepared for the model: one input tensor and the letterbox of each frame.

    ``tensor`` is laid out as the model wants it (NCHW float, or NHWC uint8), on the device of
    the preprocessor that made it. ``outputs`` is filled by the inference stage with the
    model's raw outputs, keyed by output name: numpy arrays from a host runtime, tensors
    still on the device from a GPU one, valid once ``ready`` (a CUDA event, or None)
    completes; ``started`` is the event recorded as the inference was enqueued, so the GPU
    time between the two can be read once the results are in.
    """

    frames: list[Frame]
    tensor: Picture
    letterboxes: list[Letterbox]
    outputs: dict[str, Any] = field(default_factory=dict)
    ready: Any = None
    started: Any = None

    def __post_init__(self) -> None:
        n = len(self.frames)
        if n == 0:
            raise ValueError("a Batch needs at least one frame")
        if self.tensor.ndim != 4 or self.tensor.shape[0] != n:
            raise ValueError(
                f"Batch.tensor must be 4-D with {n} items first, got {tuple(self.tensor.shape)}"
            )
        if len(self.letterboxes) != n:
            raise ValueError(f"Batch has {n} frames but {len(self.letterboxes)} letterboxes")

    def __len__(self) -> int:
        return len(self.frames)

    @classmethod
    def concat(cls, batches: Sequence[Batch]) -> Batch:
        """Join batches (from any streams) into one, in order.

        Host tensors are joined by numpy, on the calling thread alone (``torch.cat`` split a
        copy this size over its OpenMP threads, whose spinning after every call took cycles
        from the stages' own threads: docs/BENCHMARKS.md); device tensors by torch.
        """
        if not batches:
            raise ValueError("Batch.concat needs at least one batch")
        if len(batches) == 1:
            return batches[0]
        tensors = [b.tensor for b in batches]
        if any(on_device(t) for t in tensors):
            import torch

            joined: Picture = torch.cat(cast("list[torch.Tensor]", tensors))
        else:
            joined = np.concatenate([host_array(t, "Batch.tensor") for t in tensors])
        return cls(
            frames=[f for b in batches for f in b.frames],
            tensor=joined,
            letterboxes=[lb for b in batches for lb in b.letterboxes],
        )


@dataclass(slots=True)
class Detections:
    """Boxes of one frame as a struct of arrays, in source-image pixels.

    ``xyxy`` (N, 4) float32, ``score`` (N,) float32, ``class_id`` (N,) int32, ``track_id`` (N,)
    int32 with -1 for boxes no tracker has named.
    """

    xyxy: np.ndarray
    score: np.ndarray
    class_id: np.ndarray
    track_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))

    def __post_init__(self) -> None:
        self.xyxy = np.asarray(self.xyxy, dtype=np.float32)
        if self.xyxy.ndim != 2 or self.xyxy.shape[1] != 4:
            raise ValueError(f"xyxy must be (N, 4), got {self.xyxy.shape}")
        n = self.xyxy.shape[0]
        self.score = np.asarray(self.score, dtype=np.float32)
        self.class_id = np.asarray(self.class_id, dtype=np.int32)
        if self.track_id is None or (np.shape(self.track_id) == (0,) and n > 0):
            self.track_id = np.full(n, -1, dtype=np.int32)  # no tracker has named these
        self.track_id = np.asarray(self.track_id, dtype=np.int32)
        for name in ("score", "class_id", "track_id"):
            shape = getattr(self, name).shape
            if shape != (n,):
                raise ValueError(f"{name} must be ({n},) to match xyxy, got {shape}")

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    def __getitem__(self, index: Any) -> Detections:
        """Select boxes by boolean mask, slice or index array; the result is always Detections."""
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            i = int(index)
            if not -len(self) <= i < len(self):
                raise IndexError(f"detection index {i} out of range for {len(self)} boxes")
            index = slice(i, i + 1 or None)
        return Detections(
            self.xyxy[index], self.score[index], self.class_id[index], self.track_id[index]
        )


@dataclass(slots=True)
class Result:
    """What the pipeline says about one frame: its metadata, its boxes, and where its time went
    (``timings``: stage -> seconds spent on it; a batched stage's on its whole batch).
    ``predicted``: the tracker's boxes on a frame the model did not see; ``analytics``: the
    stream's counts after it, ``events`` what it completed, ``attributes`` its tracks'
    classifier answers (track -> head -> (label, confidence)); ``folded``: its line is a later
    one's, whose ``skipped_run`` names the frames it stands for (``sinks.quiet``)."""

    frame: Frame
    detections: Detections
    timings: dict[str, float] = field(default_factory=dict)
    predicted: bool = False
    analytics: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    attributes: dict[int, dict[str, tuple[str, float]]] = field(default_factory=dict)
    folded: bool = False
    skipped_run: SkippedRun | None = None
