"""Output decoding and NMS on the GPU, with torch ops: only the kept boxes cross to the host.

The same results as ``yolo.decode_outputs`` and ``nms.nms`` (the CPU path), batched:

- candidates: the class with the best score per cell, kept when it reaches the threshold;
  a stable sort orders them by score (ties keep the model's order, as ``np.argsort(kind=
  "stable")`` does), at most ``max_candidates`` per image;
- NMS: greedy NMS is the unique solution of "box j is kept unless a kept, better box
  overlaps it by more than the threshold" — a triangular system. ``batched_nms`` solves it
  for all images at once by fixed-point iteration on the suppression matrix: iteration t
  settles the first t boxes of every chain, so it ends after as many rounds as the longest
  chain of suppressions (a handful in practice), each one a tensor operation, never a Python
  loop over boxes;
- the kept boxes are mapped to source pixels through each frame's letterbox and packed into
  one (M, 6) tensor that goes to pinned host memory in a single non-blocking copy.

Functions take tensors on any device; the CPU tests check them against nms.py and yolo.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from models.spec import ModelSpec, OutputSpec
from pipelines.cuda import wait_ready
from pipelines.errors import ModelError
from pipelines.frame import Batch, Detections, Frame, copied_to_host, on_device
from pipelines.geometry import Letterbox
from pipelines.postprocess.stage import Decoded
from pipelines.postprocess.yolo import decode_ssd

MAX_CANDIDATES = 4096  # per image; a YOLO head above its threshold rarely has a tenth of that
NMS_ELEMENTS = 1 << 24  # images whose K x K overlaps are suppressed together (memory bound)


def box_iou_matrix(boxes: torch.Tensor) -> torch.Tensor:
    """[..., K, 4] xyxy -> [..., K, K] IoU; 0 where the union is empty (as nms.box_iou)."""
    area = ((boxes[..., 2] - boxes[..., 0]).clamp(min=0)
            * (boxes[..., 3] - boxes[..., 1]).clamp(min=0))
    lt = torch.maximum(boxes[..., :, None, :2], boxes[..., None, :, :2])
    rb = torch.minimum(boxes[..., :, None, 2:], boxes[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area[..., :, None] + area[..., None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=torch.finfo(union.dtype).tiny),
                       torch.zeros_like(inter))


def batched_nms(boxes: torch.Tensor, valid: torch.Tensor, iou_threshold: float,
                classes: torch.Tensor | None = None, max_keep: int | None = None) -> torch.Tensor:
    """Greedy NMS for [B, K] candidates already sorted best first; returns the [B, K] mask of
    kept ones. ``valid`` marks real candidates (rows are padded to K); with ``classes`` the
    suppression is class-aware; ``max_keep`` keeps the first that many per image."""
    k = boxes.shape[-2]
    if k == 0:
        return valid.clone()
    overlaps = box_iou_matrix(boxes) > iou_threshold
    later = torch.ones(k, k, dtype=torch.bool, device=boxes.device).triu(diagonal=1)
    suppresses = overlaps & later & valid[..., :, None] & valid[..., None, :]
    if classes is not None:
        suppresses &= classes[..., :, None] == classes[..., None, :]
    keep = valid.clone()
    for _ in range(k + 1):  # at most K rounds; usually a few
        suppressed = (keep[..., :, None] & suppresses).any(dim=-2)
        settled = valid & ~suppressed
        if torch.equal(settled, keep):
            break
        keep = settled
    if max_keep is not None:
        keep &= keep.cumsum(dim=-1) <= max_keep
    return keep


def nms_torch(xyxy: torch.Tensor, score: torch.Tensor, iou_threshold: float,
              class_id: torch.Tensor | None = None, max_keep: int | None = None) -> torch.Tensor:
    """Indices of the boxes that survive NMS, highest score first: ``nms.nms`` in torch."""
    if xyxy.ndim != 2 or xyxy.shape[-1] != 4:
        raise ValueError(f"nms boxes must be (N, 4) xyxy, got {tuple(xyxy.shape)}")
    order = torch.sort(score, descending=True, stable=True).indices
    valid = torch.ones(1, len(order), dtype=torch.bool, device=xyxy.device)
    classes = None if class_id is None else class_id[order][None]
    keep = batched_nms(xyxy[order][None], valid, iou_threshold, classes, max_keep)[0]
    return order[keep]


def decode_outputs_gpu(outputs: Mapping[str, torch.Tensor], letterboxes: Sequence[Letterbox],
                       spec: OutputSpec, input_size: tuple[int, int], num_classes: int, *,
                       max_candidates: int = MAX_CANDIDATES) -> list[Detections]:
    """``yolo.decode_outputs`` for tensors on the device; only kept boxes reach the host."""
    if spec.format == "ssd":  # NMS is inside the model and outputs are small: decode on host
        host = {name: t.float().cpu().numpy() for name, t in outputs.items()}
        ssd = [host[spec.names[role]] for role in ("boxes", "scores", "classes")]
        count = host.get(spec.names["count"]) if "count" in spec.names else None
        return decode_ssd(ssd[0], ssd[1], ssd[2], count, letterboxes, spec, input_size)
    if spec.format not in ("yolov8", "yolov5"):
        raise ModelError(f"unknown output format {spec.format!r}; expected yolov8, yolov5 or ssd")
    if len(outputs) != 1:
        raise ModelError(f"{spec.format} model must have exactly one output, got {sorted(outputs)}")
    (pred,) = outputs.values()
    cxcywh, score, class_id, valid = _candidates(pred.float(), spec.format, num_classes,
                                                 len(letterboxes), spec.score_threshold)
    order, valid = _best_first(score, valid, max_candidates)
    boxes = _cxcywh_to_xyxy(torch.gather(cxcywh, 1, order[..., None].expand(-1, -1, 4)))
    score = torch.gather(score, 1, order)
    class_id = torch.gather(class_id, 1, order)
    keep = torch.cat([
        batched_nms(boxes[part], valid[part], spec.iou_threshold, class_id[part],
                    spec.max_detections)
        for part in _chunks(len(letterboxes), boxes.shape[1])])
    return _to_host(_to_source(boxes, letterboxes), score, class_id, keep)


def _candidates(pred: torch.Tensor, fmt: str, num_classes: int, batch: int,
                threshold: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cx, cy, w, h) [B, N, 4], best score [B, N], its class [B, N] and whether it is a
    candidate [B, N], for every cell (``decode_yolov8`` / ``decode_yolov5``, batched)."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1 (ModelSpec.num_classes), got {num_classes}")
    if fmt == "yolov8":
        if pred.ndim != 3 or pred.shape[1] != 4 + num_classes:
            raise ModelError(f"yolov8 output must be [B, 4+C, N] with C={num_classes} classes, "
                             f"got {tuple(pred.shape)}")
        score, class_id = pred[:, 4:].max(dim=1)
        cxcywh = pred[:, :4].transpose(1, 2)
        valid = score >= threshold
    else:
        if pred.ndim != 3 or pred.shape[2] != 5 + num_classes:
            raise ModelError(f"yolov5 output must be [B, N, 5+C] with C={num_classes} classes, "
                             f"got {tuple(pred.shape)}")
        score, class_id = (pred[..., 5:] * pred[..., 4:5]).max(dim=2)
        cxcywh = pred[..., :4]
        # as decode_yolov5: objectness makes the first cut, then the product must pass too
        valid = (pred[..., 4] >= threshold) & (score >= threshold)
    if pred.shape[0] != batch:
        raise ModelError(f"{fmt} output holds {pred.shape[0]} batch items, but the batch had "
                         f"{batch} frames")
    return cxcywh, score, class_id, valid


def _best_first(score: torch.Tensor, valid: torch.Tensor,
                limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the candidates, best first (stable: ties keep the model's order), and which
    of the first K positions hold one; K = the most candidates of any image, at most ``limit``."""
    most = int(valid.sum(dim=1).max().item()) if valid.numel() else 0
    k = max(1, min(most, limit))
    ranked = score.masked_fill(~valid, float("-inf"))
    order = torch.sort(ranked, dim=1, descending=True, stable=True).indices[:, :k]
    return order, torch.gather(valid, 1, order)


def _chunks(batch: int, k: int) -> list[slice]:
    """Image ranges whose [n, K, K] overlap tensors stay under NMS_ELEMENTS elements."""
    step = max(1, NMS_ELEMENTS // max(1, k * k))
    return [slice(i, min(batch, i + step)) for i in range(0, batch, step)]


def _cxcywh_to_xyxy(cxcywh: torch.Tensor) -> torch.Tensor:
    half = cxcywh[..., 2:4] * 0.5
    return torch.cat([cxcywh[..., :2] - half, cxcywh[..., :2] + half], dim=-1)


def _to_source(boxes: torch.Tensor, letterboxes: Sequence[Letterbox]) -> torch.Tensor:
    """[B, K, 4] boxes from model-input to source pixels, clipped: Letterbox.to_source, batched
    (float32 arithmetic in the same order, so the results are the same to the last bit)."""
    geometry = torch.tensor([[lb.pad_x, lb.pad_y, lb.scale_x, lb.scale_y, *lb.src_size]
                             for lb in letterboxes], dtype=torch.float32)
    geometry = geometry.to(boxes.device)[:, None, :]
    pad, scale, size = geometry[..., 0:2], geometry[..., 2:4], geometry[..., 4:6]
    pad, scale, size = pad.repeat(1, 1, 2), scale.repeat(1, 1, 2), size.repeat(1, 1, 2)
    mapped = (boxes - pad) / scale
    return torch.minimum(mapped.clamp(min=0), size)


def _to_host(boxes: torch.Tensor, score: torch.Tensor, class_id: torch.Tensor,
             keep: torch.Tensor) -> list[Detections]:
    """Pack the kept boxes of every image into one (M, 6) tensor, copy it to the host once."""
    counts = keep.sum(dim=1)
    rows = torch.cat([boxes, score[..., None], class_id[..., None].float()], dim=-1)[keep]
    if rows.is_cuda:
        host = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
        host.copy_(rows, non_blocking=True)
        host_counts = counts.to("cpu", non_blocking=True)
        torch.cuda.current_stream(rows.device).synchronize()  # results leave the GPU here
    else:
        host, host_counts = rows, counts
    packed = host.numpy()
    found = []
    start = 0
    for n in host_counts.tolist():
        part = packed[start:start + n]
        found.append(Detections(part[:, :4].copy(), part[:, 4].copy(),
                                part[:, 5].astype(np.int32)))
        start += n
    return found


class TorchPostprocessor:
    """The Postprocessor for outputs on a GPU: decodes and suppresses boxes there, on its own
    stream, after the inference stream's event. Frames keep their pixels only when a sink
    draws on them; those are copied to the host here, where they leave the GPU.

    Inference only enqueues work, so its host time says little; once the results are here
    (and so the inference has finished) the batch's GPU time, measured between the
    inference's CUDA events, is handed back as the ``infer`` stage's work time."""

    concurrent = False  # one CUDA stream of its own
    on_host = False

    def __init__(self, spec: ModelSpec, device: torch.device) -> None:
        self.spec = spec
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None

    def decode(self, batch: Batch, keep_images: bool) -> Decoded:
        if self.stream is None:
            return self._decode_now(batch, keep_images)
        with torch.cuda.stream(self.stream):
            wait_ready(self.stream, [batch.ready], batch.outputs.values())
            return self._decode_now(batch, keep_images)

    def _decode_now(self, batch: Batch, keep_images: bool) -> Decoded:
        spec = self.spec
        detections = decode_outputs_gpu(batch.outputs, batch.letterboxes, spec.output,
                                        (spec.input.width, spec.input.height),
                                        spec.num_classes)
        return Decoded(detections, self._frames(batch, keep_images),
                       _elapsed(batch.started, batch.ready))

    def _frames(self, batch: Batch, keep_images: bool) -> list[Frame]:
        """The frames to hand on: without pixels, or with them on the host for the sinks."""
        if not keep_images:
            return [frame.without_image() for frame in batch.frames]
        kept = []
        for frame in batch.frames:
            if on_device(frame.image):
                if self.stream is not None:
                    wait_ready(self.stream, [frame.ready], [frame.image])
                frame = dataclasses.replace(frame, image=copied_to_host(frame.image), ready=None)
            kept.append(frame)
        return kept

    def close(self) -> None:
        """Nothing to release: the stream is torch's."""


def _elapsed(started: Any, ready: Any) -> float | None:
    """Seconds between two completed timing events, or None without them."""
    if started is None or ready is None:
        return None
    return float(started.elapsed_time(ready)) / 1000.0
