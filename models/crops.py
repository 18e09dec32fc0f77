"""What a classifier's card means, as code: the crop of a box cut from a picture and made the
model's input. The one reference for training, the pipeline and ``vidpipe model check``: a
classifier sees the same pixels wherever it runs.
"""

from __future__ import annotations

import cv2
import numpy as np

from models.classifier_spec import ClassifierInput, ClassifierSpec

_FILTERS = {"bilinear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST,
            "bicubic": cv2.INTER_CUBIC}


def crop_region(box: np.ndarray, context: float, size: tuple[int, int]) -> tuple[int, int,
                                                                                  int, int]:
    """The pixels (x1, y1, x2, y2: whole, end exclusive) of ``box`` grown by ``context`` of its
    width and height on each side, within a picture of ``size`` (w, h); at least one pixel."""
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    grow_x, grow_y = (x2 - x1) * context, (y2 - y1) * context
    width, height = size
    left = min(max(int(np.floor(x1 - grow_x)), 0), width - 1)
    top = min(max(int(np.floor(y1 - grow_y)), 0), height - 1)
    right = max(min(int(np.ceil(x2 + grow_x)), width), left + 1)
    bottom = max(min(int(np.ceil(y2 + grow_y)), height), top + 1)
    return left, top, right, bottom


def fit(crop: np.ndarray, spec: ClassifierInput) -> np.ndarray:
    """An (h, w, 3) RGB crop as the model's (height, width, 3) RGB picture, by ``resize``."""
    h, w = crop.shape[:2]
    width, height = spec.width, spec.height
    flt = _FILTERS[spec.interpolation]
    if spec.resize == "stretch":
        return cv2.resize(crop, (width, height), interpolation=flt)
    if spec.resize == "center_crop":
        scale = max(width / w, height / h)
        sized = cv2.resize(crop, (max(width, round(w * scale)), max(height, round(h * scale))),
                           interpolation=flt)
        top, left = (sized.shape[0] - height) // 2, (sized.shape[1] - width) // 2
        return sized[top:top + height, left:left + width]
    scale = min(width / w, height / h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    canvas = np.full((height, width, 3), spec.pad_value, np.uint8)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    canvas[top:top + new_h, left:left + new_w] = cv2.resize(crop, (new_w, new_h),
                                                           interpolation=flt)
    return canvas


def tensor(pictures: np.ndarray, spec: ClassifierInput) -> np.ndarray:
    """(N, height, width, 3) RGB uint8 pictures as the model's input tensor."""
    if spec.color == "BGR":
        pictures = pictures[..., ::-1]
    if spec.dtype == "uint8":
        out = np.ascontiguousarray(pictures)
    else:
        mean = np.asarray(spec.mean, np.float32) * 255.0
        scale = 1.0 / (np.asarray(spec.std, np.float32) * 255.0)
        out = (pictures.astype(np.float32) - mean) * scale
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else out


def crop_pictures(image: np.ndarray, boxes: np.ndarray, spec: ClassifierSpec) -> np.ndarray:
    """The model-sized RGB pictures (N, height, width, 3) of ``boxes`` (N, 4: source pixels)
    in ``image`` (H, W, 3 RGB uint8)."""
    size = (image.shape[1], image.shape[0])
    out = np.empty((len(boxes), spec.input.height, spec.input.width, 3), np.uint8)
    for i, box in enumerate(boxes):
        left, top, right, bottom = crop_region(box, spec.crop.context, size)
        out[i] = fit(image[top:bottom, left:right], spec.input)
    return out


def crops_tensor(image: np.ndarray, boxes: np.ndarray, spec: ClassifierSpec) -> np.ndarray:
    """``crop_pictures`` as the model's input: what the pipeline feeds the classifier."""
    return tensor(crop_pictures(image, boxes, spec), spec.input)
