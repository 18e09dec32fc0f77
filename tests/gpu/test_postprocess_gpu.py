"""GPU box decoding and NMS give exactly the CPU path's answers (nms.py, yolo.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.spec import OutputSpec
from pipelines.geometry import Letterbox
from pipelines.postprocess import gpu as gpu_post
from pipelines.postprocess.gpu import batched_nms, decode_outputs_gpu, nms_torch
from pipelines.postprocess.nms import nms
from pipelines.postprocess.yolo import decode_outputs

LETTERBOXES = [Letterbox.fit((1280, 720), (640, 640)), Letterbox.fit((320, 240), (640, 640)),
               Letterbox.fit((640, 640), (640, 640)),
               Letterbox.fit((100, 300), (640, 640), "stretch")]


def random_boxes(seed: int, n: int):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 60, (n, 2))], 1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    if seed % 3 == 0:
        scores = np.round(scores, 1)  # many ties: the order among them must match too
    if seed % 5 == 0 and n:
        boxes[: n // 4] = boxes[0]  # identical boxes
    return boxes, scores, rng.integers(0, 3, n)


def raw_outputs(fmt: str, seed: int, classes: int = 3, cells: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = len(LETTERBOXES)
    cxcy, wh = rng.uniform(0, 640, (b, cells, 2)), rng.uniform(4, 120, (b, cells, 2))
    scores = rng.uniform(0, 1, (b, cells, classes)) ** 3
    if fmt == "yolov8":
        return np.concatenate([cxcy, wh, scores], 2).transpose(0, 2, 1).astype(np.float32)
    objectness = rng.uniform(0, 1, (b, cells, 1))
    return np.concatenate([cxcy, wh, objectness, scores], 2).astype(np.float32)


def assert_same(expected, got):
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert np.array_equal(a.xyxy, b.xyxy), np.abs(a.xyxy - b.xyxy).max()
        assert np.array_equal(a.score, b.score)
        assert np.array_equal(a.class_id, b.class_id)


def check_nms(seed: int, device: torch.device) -> None:
    n = [0, 1, 7, 150, 400][seed % 5]
    boxes, scores, classes = random_boxes(seed, n)
    threshold = [0.3, 0.5, 0.7][seed % 3]
    max_keep = [None, 5, 50][seed % 3]
    aware = seed % 2 == 0
    expected = nms(boxes, scores, threshold, classes if aware else None, max_keep)
    got = nms_torch(torch.from_numpy(boxes).to(device), torch.from_numpy(scores).to(device),
                    threshold, torch.from_numpy(classes).to(device) if aware else None, max_keep)
    assert np.array_equal(got.cpu().numpy(), expected)


def check_decode(fmt: str, seed: int, device: torch.device) -> None:
    spec = OutputSpec(format=fmt, score_threshold=0.3, iou_threshold=0.5, max_detections=100)
    pred = raw_outputs(fmt, seed)
    expected = decode_outputs({"out": pred}, LETTERBOXES, spec, (640, 640), 3)
    got = decode_outputs_gpu({"out": torch.from_numpy(pred).to(device)}, LETTERBOXES, spec,
                             (640, 640), 3)
    assert_same(expected, got)


@pytest.mark.parametrize("seed", range(15))
def test_torch_nms_is_nms_py(seed):
    check_nms(seed, torch.device("cpu"))


@pytest.mark.parametrize("fmt", ["yolov8", "yolov5"])
def test_torch_decoding_is_yolo_py(fmt):
    check_decode(fmt, 0, torch.device("cpu"))


def test_images_are_suppressed_in_chunks_with_the_same_result(monkeypatch):
    monkeypatch.setattr(gpu_post, "NMS_ELEMENTS", 1)  # one image at a time
    check_decode("yolov8", 1, torch.device("cpu"))


def test_no_candidate_gives_empty_detections():
    spec = OutputSpec(format="yolov8", score_threshold=0.99)
    pred = np.zeros((2, 7, 50), np.float32)
    found = decode_outputs_gpu({"o": torch.from_numpy(pred)}, LETTERBOXES[:2], spec, (640, 640), 3)
    assert [len(d) for d in found] == [0, 0]


def test_chains_of_suppression_settle_like_greedy_nms():
    # a chain: 0 suppresses 1, 1 would suppress 2 but is gone, so 2 survives
    boxes = torch.tensor([[[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10]]], dtype=torch.float32)
    keep = batched_nms(boxes, torch.ones(1, 3, dtype=torch.bool), 0.3)
    assert keep.tolist() == [[True, False, True]]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(15))
def test_cuda_nms_is_nms_py(seed, cuda):
    check_nms(seed, cuda)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["yolov8", "yolov5"])
@pytest.mark.parametrize("seed", range(3))
def test_cuda_decoding_is_yolo_py(fmt, seed, cuda):
    check_decode(fmt, seed, cuda)
