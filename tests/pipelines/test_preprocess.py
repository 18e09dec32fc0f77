"""OpenCV preprocessing: pixels land where the letterbox says, in the model's form."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pytest
import torch

from models.spec import InputSpec
from pipelines.frame import Frame
from pipelines.geometry import Letterbox
from pipelines.preprocess.linear import resize_linear
from pipelines.preprocess.opencv import OpenCVPreprocessor

SOURCES = [(1280, 720), (720, 1280), (333, 997), (1000, 101)]
INPUTS = [(640, 640), (320, 256)]
PAD = 77
BACKGROUND = 10


def frame_of(image: np.ndarray, index: int = 0) -> Frame:
    return Frame("cam", index, pts=None, captured_at=0.0, image=image)


def random_image(size: tuple[int, int], seed: int = 0) -> np.ndarray:
    w, h = size
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def spec(size: tuple[int, int] = (320, 256), **overrides: Any) -> InputSpec:
    w, h = size
    return InputSpec.model_validate({"width": w, "height": h, "pad_value": PAD} | overrides)


def white_box_scene(src: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A dark frame with one white rectangle; returns the image and the rectangle (xyxy)."""
    w, h = src
    box = np.array([[round(w * 0.2), round(h * 0.3), round(w * 0.6), round(h * 0.8)]])
    image = np.full((h, w, 3), BACKGROUND, dtype=np.uint8)
    image[box[0, 1]:box[0, 3], box[0, 0]:box[0, 2]] = 255
    return image, box.astype(np.float32)


def bright_extent(plane: np.ndarray) -> list[int]:
    """xyxy (exclusive end) of the pixels brighter than mid-grey."""
    ys, xs = np.nonzero(plane > 128)
    return [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


@pytest.mark.parametrize("mode", ["letterbox", "stretch"])
@pytest.mark.parametrize("input_size", INPUTS, ids=["640x640", "320x256"])
@pytest.mark.parametrize("src", SOURCES, ids=[f"{w}x{h}" for w, h in SOURCES])
def test_content_lands_where_the_letterbox_says(
    src: tuple[int, int], input_size: tuple[int, int], mode: Any
) -> None:
    image, box = white_box_scene(src)
    pre = OpenCVPreprocessor(spec(input_size, dtype="uint8", layout="NHWC", resize=mode))
    batch = pre.prepare(frame_of(image))
    lb = batch.letterboxes[0]
    assert lb == Letterbox.fit(src, input_size, mode)
    canvas = batch.tensor[0]
    # within a pixel: interpolation blurs the edge, and the resized size is rounded
    np.testing.assert_allclose(bright_extent(canvas[..., 0]), lb.to_input(box)[0], atol=1.0)
    x0, y0 = int(lb.pad_x), int(lb.pad_y)
    new_w, new_h = lb.resized
    inside = np.zeros(canvas.shape[:2], dtype=bool)
    inside[y0:y0 + new_h, x0:x0 + new_w] = True
    assert (canvas[~inside] == PAD).all(), "padding must hold pad_value"
    assert (canvas[inside] != PAD).all(), "the resized frame must fill its area exactly"


@pytest.mark.parametrize(
    ("color", "mean", "std"),
    [
        ("RGB", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
        ("RGB", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ("BGR", (0.406, 0.456, 0.485), (0.225, 0.224, 0.229)),
        ("BGR", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ],
    ids=["rgb-unit", "rgb-imagenet", "bgr-imagenet", "bgr-symmetric"],
)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_float_normalisation_per_channel(
    layout: str, color: str, mean: tuple[float, ...], std: tuple[float, ...]
) -> None:
    rgb = (200, 100, 50)
    image = np.empty((90, 160, 3), dtype=np.uint8)
    image[:] = rgb
    pre = OpenCVPreprocessor(spec(layout=layout, color=color, mean=mean, std=std))
    tensor = pre.prepare(frame_of(image)).tensor
    assert tensor.dtype == np.float32
    nhwc = tensor[0] if layout == "NHWC" else tensor[0].transpose(1, 2, 0)
    order = rgb if color == "RGB" else rgb[::-1]
    expected = (np.array(order) / 255 - np.array(mean)) / np.array(std)
    expected_pad = (PAD / 255 - np.array(mean)) / np.array(std)
    # 160x90 -> 320x180 centred in 320x256: rows 38..217 are the frame, the rest padding
    np.testing.assert_allclose(nhwc[38:218], np.broadcast_to(expected, (180, 320, 3)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nhwc[:38], np.broadcast_to(expected_pad, (38, 320, 3)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nhwc[218:], np.broadcast_to(expected_pad, (38, 320, 3)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("color", ["RGB", "BGR"])
def test_layouts_hold_the_same_pixels(dtype: str, color: str) -> None:
    frame = frame_of(random_image((333, 997)))
    nchw = OpenCVPreprocessor(spec(dtype=dtype, color=color, layout="NCHW")).prepare(frame)
    nhwc = OpenCVPreprocessor(spec(dtype=dtype, color=color, layout="NHWC")).prepare(frame)
    assert tuple(nchw.tensor.shape) == (1, 3, 256, 320)
    assert tuple(nhwc.tensor.shape) == (1, 256, 320, 3)
    assert nchw.tensor.dtype == nhwc.tensor.dtype == np.dtype(dtype)
    assert nchw.tensor.flags.c_contiguous and nhwc.tensor.flags.c_contiguous
    np.testing.assert_array_equal(nchw.tensor.transpose(0, 2, 3, 1), nhwc.tensor)


@pytest.mark.parametrize(("dtype", "layout"), [("uint8", "NHWC"), ("uint8", "NCHW"),
                                               ("float32", "NCHW"), ("float32", "NHWC")])
def test_bgr_reverses_the_channels(dtype: str, layout: str) -> None:
    frame = frame_of(random_image((1280, 720)))
    rgb = OpenCVPreprocessor(spec(dtype=dtype, layout=layout)).prepare(frame).tensor
    bgr = OpenCVPreprocessor(spec(dtype=dtype, layout=layout, color="BGR")).prepare(frame).tensor
    channel_axis = 3 if layout == "NHWC" else 1
    assert not np.array_equal(rgb, bgr)
    np.testing.assert_array_equal(bgr, np.flip(rgb, channel_axis))


def test_float_is_the_uint8_picture_normalised() -> None:
    frame = frame_of(random_image((720, 1280)))
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    u8 = OpenCVPreprocessor(spec(dtype="uint8")).prepare(frame).tensor
    f32 = OpenCVPreprocessor(spec(mean=mean, std=std)).prepare(frame).tensor
    expected = (u8 / 255 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    np.testing.assert_allclose(f32, expected, rtol=1e-5, atol=1e-6)


def test_prepare_many_matches_prepare_frame_by_frame() -> None:
    frames = [frame_of(random_image(src, seed=i), index=i) for i, src in enumerate(SOURCES)]
    pre = OpenCVPreprocessor(spec(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)))
    batch = pre.prepare_many(frames)
    assert tuple(batch.tensor.shape) == (4, 3, 256, 320)
    assert batch.tensor.flags.c_contiguous
    assert batch.frames == frames
    assert [lb.src_size for lb in batch.letterboxes] == SOURCES
    for i, frame in enumerate(frames):
        single = OpenCVPreprocessor(pre.spec).prepare(frame)
        np.testing.assert_array_equal(batch.tensor[i], single.tensor[0], err_msg=f"item {i}")


@pytest.mark.parametrize(("first", "second"), [((1000, 101), (101, 1000)),
                                               ((101, 1000), (1000, 101))])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_no_pixels_leak_from_the_previous_frame(
    first: tuple[int, int], second: tuple[int, int], dtype: str
) -> None:
    """The reused scratch canvas must not keep the last frame where this one is padding."""
    pre = OpenCVPreprocessor(spec(dtype=dtype))
    pre.prepare(frame_of(np.full((first[1], first[0], 3), 255, np.uint8)))
    later = frame_of(random_image(second))
    np.testing.assert_array_equal(pre.prepare(later).tensor,
                                  OpenCVPreprocessor(spec(dtype=dtype)).prepare(later).tensor)


def test_results_do_not_share_memory_between_calls() -> None:
    pre = OpenCVPreprocessor(spec(dtype="uint8", layout="NHWC"))
    first = pre.prepare(frame_of(np.zeros((256, 320, 3), np.uint8))).tensor
    pre.prepare(frame_of(np.full((256, 320, 3), 200, np.uint8)))
    assert int(first.max()) == 0


def test_strided_frame_image_is_read_correctly() -> None:
    full = random_image((1280, 720))
    view = full[:, 100:900]  # rows with gaps: not contiguous
    assert not view.flags.c_contiguous
    pre = OpenCVPreprocessor(spec())
    expected = pre.prepare(frame_of(np.ascontiguousarray(full[:, 100:900]))).tensor
    np.testing.assert_array_equal(pre.prepare(Frame("cam", 0, None, 0.0, view)).tensor, expected)


def test_the_cards_filter_decides_how_a_picture_shrinks() -> None:
    """A 4x shrink of one-pixel lines every 4 columns: ``area`` keeps their mean brightness,
    ``bilinear`` (the default, what most detectors train with) samples between them, as
    cv2.resize does; vidpipe does not swap one for the other behind the card's back."""
    image = np.zeros((1024, 1280, 3), np.uint8)
    image[:, ::4] = 255
    area = OpenCVPreprocessor(spec(dtype="uint8", layout="NHWC", interpolation="area"))
    canvas = area.prepare(frame_of(image))
    assert canvas.letterboxes[0].scale_x == 0.25
    np.testing.assert_allclose(canvas.tensor[0].mean(), 255 / 4, atol=1.0)
    bilinear = OpenCVPreprocessor(spec(dtype="uint8", layout="NHWC"))
    got = bilinear.prepare(frame_of(image)).tensor[0]
    assert np.array_equal(got, cv2.resize(image, (320, 256), interpolation=cv2.INTER_LINEAR))
    assert abs(got.mean() - 255 / 4) > 10  # the lines fall between its samples


def test_same_size_input_passes_pixels_through() -> None:
    image = random_image((320, 256))
    tensor = OpenCVPreprocessor(spec(dtype="uint8", layout="NHWC")).prepare(frame_of(image))
    assert np.array_equal(tensor.tensor[0], image)


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([], "at least one frame"),
        ([frame_of(random_image((64, 48))).without_image()], "cam#0 has no image"),
    ],
    ids=["no-frames", "released-image"],
)
def test_prepare_many_rejects_unusable_frames(frames: list[Frame], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenCVPreprocessor(spec()).prepare_many(frames)


@pytest.mark.parametrize(("source", "target"), [
    ((1920, 1080), (640, 360)), ((1280, 720), (640, 360)), ((320, 240), (640, 480)),
    ((854, 480), (640, 360)), ((1000, 700), (333, 233)), ((77, 77), (500, 500)),
    ((642, 362), (640, 361)), ((5, 3), (2, 7))])
def test_the_torch_bilinear_resize_is_opencv_s_to_the_bit(source, target) -> None:
    """pipelines/preprocess/linear.py redoes cv2.INTER_LINEAR's fixed-point arithmetic on
    uint8: downscales, upscales, an exact half, odd sizes and a tiny picture."""
    (w, h), (dw, dh) = source, target
    noise = np.random.default_rng(w * h).integers(0, 256, (h, w, 3), dtype=np.uint8)
    image = cv2.GaussianBlur(noise, (0, 0), 1.5)
    expected = cv2.resize(image, (dw, dh), interpolation=cv2.INTER_LINEAR)
    got = resize_linear(torch.from_numpy(image), dw, dh).numpy()
    assert got.shape == expected.shape and np.array_equal(got, expected), \
        np.abs(got.astype(int) - expected.astype(int)).max()
