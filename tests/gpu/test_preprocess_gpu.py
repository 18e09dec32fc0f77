"""GPU preprocessing gives OpenCVPreprocessor's tensor: torch (on the CPU here, on CUDA with
a GPU) exactly for bilinear cards and to within one grey level for the other filters, CV-CUDA
(where installed) to within a few."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from models.spec import InputSpec
from pipelines.cuda import library_available, new_stream, record_ready
from pipelines.errors import DeviceError
from pipelines.frame import Frame, Picture, copied_to_host
from pipelines.preprocess.opencv import OpenCVPreprocessor
from pipelines.preprocess.reference import OPENCV_FILTERS
from pipelines.preprocess.torch_cuda import TorchPreprocessor, resize_weights
from tests.gpu.agreement import need

SPECS = {
    "yolo": InputSpec(width=640, height=640),
    "imagenet-bgr": InputSpec(width=320, height=320, color="BGR", mean=(0.485, 0.456, 0.406),
                              std=(0.229, 0.224, 0.225)),
    "uint8-nhwc": InputSpec(width=300, height=300, layout="NHWC", dtype="uint8"),
    "stretch-nhwc": InputSpec(width=256, height=192, layout="NHWC", resize="stretch"),
    "uint8-nchw": InputSpec(width=320, height=256, dtype="uint8"),
    "area": InputSpec(width=320, height=320, interpolation="area"),
    "nearest": InputSpec(width=320, height=320, interpolation="nearest"),
    "bicubic-nhwc": InputSpec(width=300, height=300, layout="NHWC", dtype="uint8",
                              interpolation="bicubic"),
}
SIZES = [(1920, 1080), (1280, 720), (320, 240), (400, 160), (641, 479), (100, 300)]


def picture(size, seed=0):
    w, h = size
    noise = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (0, 0), 1.5)


def grey_levels(spec: InputSpec, a: Picture, b: Picture) -> np.ndarray:
    """|a - b| in input grey levels (float inputs are scaled back by 255 * std)."""
    diff = np.abs(copied_to_host(a).astype(np.float64) - copied_to_host(b).astype(np.float64))
    return diff * (255.0 * min(spec.std) if spec.dtype == "float32" else 1.0)


def compare(spec: InputSpec, prepare, images) -> np.ndarray:
    frames = [Frame("s", i, None, 0.0, img) for i, img in enumerate(images)]
    expected = OpenCVPreprocessor(spec).prepare_many(frames)
    got = prepare(frames)
    assert got.letterboxes == expected.letterboxes
    assert tuple(got.tensor.shape) == expected.tensor.shape
    assert str(got.tensor.dtype) == f"torch.{expected.tensor.dtype}"
    return grey_levels(spec, got.tensor, expected.tensor)


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("size", SIZES)
def test_torch_preprocessing_matches_opencv_on_the_cpu(name, size):
    spec = SPECS[name]
    diff = compare(spec, TorchPreprocessor(spec, "cpu").prepare_many, [picture(size)])
    assert_close_as_promised(spec, diff)


def assert_close_as_promised(spec: InputSpec, diff: np.ndarray) -> None:
    """Bilinear is OpenCV's fixed-point arithmetic (pipelines/preprocess/linear.py): equal.
    The other filters are float weight matrices: at most one grey level apart."""
    if spec.interpolation == "bilinear":
        assert diff.max() == 0, f"{(diff > 0).mean():.3%} of the values differ"
    else:
        assert diff.max() <= 1.0 + 1e-3
        assert diff.mean() <= 0.15


@pytest.mark.parametrize("interpolation", sorted(OPENCV_FILTERS))
@pytest.mark.parametrize(("src", "dst"), [(1080, 320), (1920, 640), (999, 333), (7, 3), (5, 5),
                                          (180, 300)])
def test_resize_weights_are_opencvs(src, dst, interpolation):
    weights = resize_weights(src, dst, interpolation).numpy().astype(np.float64)
    assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-5)
    signal = np.random.default_rng(src).uniform(0, 255, (src, 4)).astype(np.float32)
    expected = cv2.resize(signal, (4, dst), interpolation=OPENCV_FILTERS[interpolation])
    assert np.allclose(weights @ signal, expected, atol=1e-3)


def test_a_batch_keeps_frame_order_and_letterboxes():
    spec = SPECS["yolo"]
    images = [picture(size, i) for i, size in enumerate(SIZES[:4])]
    diff = compare(spec, TorchPreprocessor(spec, "cpu").prepare_many, images)
    assert_close_as_promised(spec, diff)


def test_without_cvcuda_the_preprocessor_names_it():
    if library_available("cvcuda"):
        pytest.skip("CV-CUDA is installed")
    from pipelines.preprocess.cvcuda import CvCudaPreprocessor

    with pytest.raises(DeviceError, match="cvcuda"):
        CvCudaPreprocessor(SPECS["yolo"], "cuda:0")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SPECS))
def test_torch_cuda_preprocessing_matches_opencv(name, cuda):
    spec = SPECS[name]
    pre = TorchPreprocessor(spec, cuda)
    images = [picture(size, i) for i, size in enumerate(SIZES)]
    assert_close_as_promised(spec, compare(spec, pre.prepare_many, images))


@pytest.mark.gpu
def test_gpu_frames_are_read_after_their_ready_event(cuda):
    """Frames decoded on another stream, handed over with an event: the result is the same
    as from the host copy, and each frame's ready event now marks its batch slot."""
    spec = SPECS["yolo"]
    producer = new_stream(cuda)
    images = [picture((1280, 720), i) for i in range(4)]
    frames = []
    with torch.cuda.stream(producer):
        for i, image in enumerate(images):
            slow = torch.randn(2048, 2048, device=cuda)
            for _ in range(4):  # the producer is still busy when the consumer starts
                slow = slow @ slow / 2048
            gpu_image = torch.from_numpy(image).to(cuda, non_blocking=True) + (slow[0, 0] * 0).to(
                torch.uint8)
            frames.append(Frame("s", i, None, 0.0, gpu_image, ready=record_ready(producer)))
    pre = TorchPreprocessor(spec, cuda)
    batch = pre.prepare_many(frames)
    assert all(f.ready is not None for f in frames)
    frames[0].ready.synchronize()
    host = [Frame("s", i, None, 0.0, img) for i, img in enumerate(images)]
    expected = OpenCVPreprocessor(spec).prepare_many(host)
    assert grey_levels(spec, batch.tensor, expected.tensor).max() <= 1.0 + 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SPECS))
def test_cvcuda_preprocessing_is_close_to_opencv(name, cuda):
    need("cvcuda")
    from pipelines.preprocess.cvcuda import CvCudaPreprocessor

    spec = SPECS[name]
    pre = CvCudaPreprocessor(spec, str(cuda))
    images = [picture(size, i) for i, size in enumerate(SIZES)]
    diff = compare(spec, pre.prepare_many, images)
    torch.cuda.synchronize()
    assert diff.mean() <= 0.5 and np.percentile(diff, 99.9) <= 3.0, (diff.mean(), diff.max())


def test_a_tensor_goes_to_cv_cuda_with_the_stream_it_was_written_on():
    """Issue 23, item 4: torch's CUDA Array Interface is version 2, without a stream, which
    makes CV-CUDA wait on the legacy default stream; handed over as version 3 with the
    stage's stream, CV-CUDA orders its work after that stream instead."""
    from pipelines.preprocess.cvcuda import OnStream

    class TorchLike:  # what a CUDA tensor exports (torch 2.x)
        __cuda_array_interface__ = {"shape": (1, 4, 4, 3), "typestr": "|u1",
                                    "data": (140_000, False), "strides": None, "version": 2}

    tensor = TorchLike()
    wrapped = OnStream(tensor, 94_557)
    assert wrapped.__cuda_array_interface__ == TorchLike.__cuda_array_interface__ | {
        "version": 3, "stream": 94_557}
    assert wrapped.tensor is tensor  # kept alive while CV-CUDA holds the wrapper
    with pytest.raises(ValueError, match="ambiguous"):
        OnStream(tensor, 0)
