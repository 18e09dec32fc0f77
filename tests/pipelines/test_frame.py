"""The flowing types check their own shapes, and the letterbox maps pixels both ways."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipelines.frame import Batch, Detections, Frame, copied_to_host, host_array, on_device
from pipelines.geometry import Letterbox


def make_frame(index: int = 0, size: tuple[int, int] = (32, 24), stream: str = "cam") -> Frame:
    w, h = size
    return Frame(stream, index, pts=index / 25, captured_at=float(index),
                 image=np.zeros((h, w, 3), np.uint8))


def make_batch(frames: list[Frame], fill: float = 0.0) -> Batch:
    n = len(frames)
    return Batch(frames=frames, tensor=np.full((n, 3, 8, 8), fill, np.float32),
                 letterboxes=[Letterbox.fit(f.size, (8, 8)) for f in frames])


# --- Frame ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": -1}, "frame index must be >= 0, got -1"),
        ({"image": np.zeros((4, 4), np.uint8)}, r"\(H, W, 3\), got \(4, 4\)"),
        ({"image": np.zeros((4, 4, 4), np.uint8)}, r"\(H, W, 3\), got \(4, 4, 4\)"),
        ({"image": np.zeros((3, 4, 4), np.uint8)}, r"\(H, W, 3\), got \(3, 4, 4\)"),
        ({"image": np.zeros((4, 4, 3), np.float32)}, "must be uint8, got float32"),
    ],
    ids=["negative-index", "2d", "4-channels", "chw", "float"],
)
def test_frame_rejects_bad_values(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"stream_id": "cam", "index": 0, "pts": 0.0, "captured_at": 0.0,
                              "image": np.zeros((4, 4, 3), np.uint8)}
    with pytest.raises(ValueError, match=message):
        Frame(**(fields | kwargs))


def test_a_frame_holds_an_array_not_a_list() -> None:
    with pytest.raises(TypeError, match="must be a numpy array .* got list"):
        Frame("cam", 0, 0.0, 0.0, [[[0, 0, 0]]])  # type: ignore[arg-type]


def test_a_torch_picture_is_checked_like_a_numpy_one() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="must be uint8, got torch.float32"):
        Frame("cam", 0, 0.0, 0.0, torch.zeros((4, 4, 3), dtype=torch.float32))
    picture = torch.full((4, 4, 3), 7, dtype=torch.uint8)
    frame = Frame("cam", 0, 0.0, 0.0, picture)
    assert not on_device(frame.image)
    viewed = host_array(frame.image)
    assert isinstance(viewed, np.ndarray) and viewed[0, 0, 0] == 7
    viewed[0, 0, 0] = 9  # a view of the tensor's memory, not a copy
    assert int(picture[0, 0, 0]) == 9
    assert copied_to_host(picture).shape == (4, 4, 3)


def test_a_numpy_picture_is_its_own_host_array() -> None:
    image = np.zeros((4, 4, 3), np.uint8)
    assert host_array(image) is image and copied_to_host(image) is image
    assert not on_device(image)
    with pytest.raises(TypeError, match="Batch.tensor must be a numpy array"):
        host_array("pixels", "Batch.tensor")


def test_frame_size_is_width_height() -> None:
    assert make_frame(size=(1280, 720)).size == (1280, 720)


def test_frame_without_image_keeps_metadata_and_has_no_size() -> None:
    frame = make_frame(index=7, stream="door")
    frame.ready = object()
    light = frame.without_image()
    assert (light.stream_id, light.index, light.pts, light.captured_at) == ("door", 7, 7 / 25, 7.0)
    assert light.image is None and light.ready is None
    assert frame.image is not None  # the original still holds its pixels
    with pytest.raises(ValueError, match="door#7 no longer holds its image"):
        _ = light.size


def test_a_frame_s_copies_change_only_what_they_say() -> None:
    """``without_image`` and ``without_riders`` skip the checks a new frame gets: every
    other field must come over as it was."""
    rider = make_frame(index=3, stream="door")
    frame = Frame("door", 4, 0.16, 4.0, np.zeros((24, 32, 3), np.uint8), ready=object(),
                  timings={"decode": 0.001}, source_size=(64, 48), riders=[rider], gap_s=1.5,
                  skipped="idle", model="m.onnx")
    kept = {"stream_id", "index", "pts", "captured_at", "timings", "source_size", "gap_s",
            "skipped", "model"}
    for copy, changed in ((frame.without_image(), {"image": None, "ready": None,
                                                   "load": None}),
                          (frame.without_riders(), {"riders": []})):
        assert all(getattr(copy, name) == getattr(frame, name) for name in kept)
        assert all(getattr(copy, name) == value for name, value in changed.items())
    assert frame.without_image().riders[0].image is None  # the riders' pixels released too
    assert frame.without_riders().image is frame.image and frame.riders == [rider]


# --- Batch ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("n_frames", "tensor_shape", "n_letterboxes", "message"),
    [
        (0, (0, 3, 8, 8), 0, "at least one frame"),
        (2, (2, 8, 8), 2, r"4-D with 2 items first, got \(2, 8, 8\)"),
        (2, (3, 3, 8, 8), 2, r"4-D with 2 items first, got \(3, 3, 8, 8\)"),
        (2, (2, 3, 8, 8), 1, "2 frames but 1 letterboxes"),
    ],
    ids=["empty", "3d-tensor", "tensor-batch-mismatch", "letterbox-count"],
)
def test_batch_rejects_inconsistent_parts(
    n_frames: int, tensor_shape: tuple[int, ...], n_letterboxes: int, message: str
) -> None:
    frames = [make_frame(i) for i in range(n_frames)]
    letterboxes = [Letterbox.fit((32, 24), (8, 8))] * n_letterboxes
    with pytest.raises(ValueError, match=message):
        Batch(frames=frames, tensor=np.zeros(tensor_shape), letterboxes=letterboxes)


def test_batch_concat_joins_in_order() -> None:
    a = make_batch([make_frame(0, stream="a"), make_frame(1, stream="a")], fill=1.0)
    b = make_batch([make_frame(0, (64, 16), stream="b")], fill=2.0)
    joined = Batch.concat([a, b])
    assert len(joined) == 3
    assert [(f.stream_id, f.index) for f in joined.frames] == [("a", 0), ("a", 1), ("b", 0)]
    assert joined.tensor[:, 0, 0, 0].tolist() == [1.0, 1.0, 2.0]
    assert joined.letterboxes == a.letterboxes + b.letterboxes
    assert joined.outputs == {} and joined.tensor.dtype == a.tensor.dtype


def test_batch_concat_of_one_is_that_batch() -> None:
    batch = make_batch([make_frame()])
    assert Batch.concat([batch]) is batch


# --- Detections ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("xyxy", "score", "class_id", "track_id", "message"),
    [
        (np.zeros(4), np.zeros(1), np.zeros(1), None, r"xyxy must be \(N, 4\), got \(4,\)"),
        (np.zeros((2, 5)), np.zeros(2), np.zeros(2), None, r"xyxy must be \(N, 4\), got \(2, 5\)"),
        (np.zeros((2, 4)), np.zeros(3), np.zeros(2), None, r"score must be \(2,\).*got \(3,\)"),
        (np.zeros((2, 4)), np.zeros(2), np.zeros((2, 1)), None,
         r"class_id must be \(2,\).*got \(2, 1\)"),
        (np.zeros((2, 4)), np.zeros(2), np.zeros(2), np.zeros(1), r"track_id must be \(2,\)"),
    ],
    ids=["xyxy-1d", "xyxy-5-columns", "score-length", "class-id-2d", "track-id-length"],
)
def test_detections_reject_bad_shapes(
    xyxy: np.ndarray, score: np.ndarray, class_id: np.ndarray, track_id: np.ndarray | None,
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        Detections(xyxy, score, class_id, track_id)


def test_detections_normalise_dtypes_and_default_track_ids() -> None:
    d = Detections([[0, 0, 1, 1], [1, 1, 2, 2]], [0.5, 0.25], [3.0, 4.0])
    assert (d.xyxy.dtype, d.score.dtype, d.class_id.dtype, d.track_id.dtype) == (
        np.float32, np.float32, np.int32, np.int32)
    assert d.track_id.tolist() == [-1, -1]
    assert d.class_id.tolist() == [3, 4]


def test_empty_detections() -> None:
    d = Detections.empty()
    assert len(d) == 0
    assert d.xyxy.shape == (0, 4) and d.track_id.shape == (0,)


def five_detections() -> Detections:
    xyxy = np.arange(20, dtype=np.float32).reshape(5, 4)
    return Detections(xyxy, np.linspace(0.1, 0.5, 5), np.arange(5), np.arange(10, 15))


@pytest.mark.parametrize(
    ("index", "expected_classes"),
    [
        (np.array([True, False, True, False, False]), [0, 2]),
        (np.zeros(5, dtype=bool), []),
        (slice(1, 4), [1, 2, 3]),
        (slice(None, None, -2), [4, 2, 0]),
        (0, [0]),
        (3, [3]),
        (-1, [4]),
        (-2, [3]),
        (np.int64(2), [2]),
        (np.array([4, 0]), [4, 0]),
    ],
    ids=["mask", "empty-mask", "slice", "reverse-step", "int-0", "int-3", "int-last",
         "int-second-last", "numpy-int", "index-array"],
)
def test_detections_indexing_keeps_fields_aligned(index: Any, expected_classes: list[int]) -> None:
    picked = five_detections()[index]
    assert isinstance(picked, Detections)
    assert picked.class_id.tolist() == expected_classes
    assert picked.track_id.tolist() == [10 + c for c in expected_classes]
    assert picked.xyxy[:, 0].tolist() == [4.0 * c for c in expected_classes]
    np.testing.assert_allclose(picked.score, [0.1 + 0.1 * c for c in expected_classes], rtol=1e-6)


def test_detections_mask_of_wrong_length_fails() -> None:
    with pytest.raises(IndexError):
        five_detections()[np.array([True, False])]


# --- Letterbox -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("src", "dst", "mode", "message"),
    [
        ((0, 10), (64, 64), "letterbox", r"sizes must be positive, got src=\(0, 10\)"),
        ((10, 10), (64, -1), "stretch", r"dst=\(64, -1\)"),
        ((10, 10), (64, 64), "crop", "resize mode must be 'letterbox' or 'stretch', got 'crop'"),
    ],
    ids=["zero-source", "negative-input", "unknown-mode"],
)
def test_letterbox_fit_rejects_bad_arguments(
    src: tuple[int, int], dst: tuple[int, int], mode: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Letterbox.fit(src, dst, mode)


@pytest.mark.parametrize(
    ("src", "dst", "mode", "scale", "pad", "resized"),
    [
        ((1280, 720), (640, 640), "letterbox", (0.5, 0.5), (0, 140), (640, 360)),
        ((720, 1280), (640, 640), "letterbox", (0.5, 0.5), (140, 0), (360, 640)),
        ((1000, 101), (320, 256), "letterbox", (0.32, 32 / 101), (0, 112), (320, 32)),
        ((333, 997), (320, 256), "letterbox", (86 / 333, 256 / 997), (117, 0), (86, 256)),
        ((640, 640), (640, 640), "letterbox", (1.0, 1.0), (0, 0), (640, 640)),
        ((1280, 720), (320, 256), "stretch", (0.25, 256 / 720), (0, 0), (320, 256)),
    ],
    ids=["landscape", "portrait", "very-wide", "tall-odd", "identity", "stretch"],
)
def test_letterbox_fit_geometry(
    src: tuple[int, int], dst: tuple[int, int], mode: Any, scale: tuple[float, float],
    pad: tuple[int, int], resized: tuple[int, int],
) -> None:
    lb = Letterbox.fit(src, dst, mode)
    assert (lb.scale_x, lb.scale_y) == pytest.approx(scale)
    assert (lb.pad_x, lb.pad_y) == pad
    assert lb.resized == resized
    assert lb.src_size == src


@pytest.mark.parametrize("mode", ["letterbox", "stretch"])
@pytest.mark.parametrize("src", [(1280, 720), (720, 1280), (333, 997), (1000, 101)])
def test_letterbox_maps_boxes_both_ways(src: tuple[int, int], mode: Any) -> None:
    lb = Letterbox.fit(src, (320, 256), mode)
    w, h = src
    corners = np.array([[0, 0, w, h], [w * 0.25, h * 0.5, w * 0.75, h * 0.9]], np.float32)
    on_input = lb.to_input(corners)
    # the whole source lands exactly on the resized area, centred by the pads
    np.testing.assert_allclose(on_input[0], [lb.pad_x, lb.pad_y, lb.pad_x + w * lb.scale_x,
                                             lb.pad_y + h * lb.scale_y], atol=1e-3)
    np.testing.assert_allclose(lb.to_source(on_input), corners, atol=1e-3)


def test_letterbox_maps_empty_box_arrays() -> None:
    lb = Letterbox.fit((1280, 720), (640, 640))
    assert lb.to_source(np.zeros((0, 4))).shape == (0, 4)
    assert lb.to_input(np.zeros((0, 4))).shape == (0, 4)


def test_letterbox_to_source_clips_to_the_image() -> None:
    lb = Letterbox.fit((1280, 720), (640, 640))
    # a box that spills into the top padding and past the right edge
    spilled = np.array([[600.0, 100.0, 700.0, 300.0]], np.float32)
    np.testing.assert_allclose(lb.to_source(spilled), [[1200.0, 0.0, 1280.0, 320.0]])


def test_letterbox_scales_are_those_of_the_drawn_picture() -> None:
    # 333 * (256 / 997) = 85.5 px wide: drawn as 86 px, so the x scale must be 86 / 333.
    lb = Letterbox.fit((333, 997), (320, 256))
    assert lb.resized == (86, 256)
    assert lb.scale_x == 86 / 333 and lb.scale_y == 256 / 997
    right_edge = lb.to_source(np.array([[lb.pad_x, 0, lb.pad_x + 86, 256]], np.float32))
    np.testing.assert_allclose(right_edge, [[0, 0, 333, 997]], atol=1e-3)


def test_detections_int_index_out_of_range_raises() -> None:
    d = Detections(np.zeros((2, 4)), np.ones(2), np.zeros(2))
    assert len(d[1]) == 1 and len(d[-2]) == 1
    with pytest.raises(IndexError, match="out of range"):
        d[2]
