"""The classifiers' step of the analytics stage: for the detected frames of one call (any
streams), the crops each classifier is to answer for, cut from each frame's full picture,
joined into one batch per classifier across tracks and streams, and the answers handed back
to each stream's ``TrackAttributes`` before its lines and zones count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.crops import crops_tensor
from pipelines.classify.model import Answer, Classifier
from pipelines.classify.tracks import Request, TrackAttributes
from pipelines.frame import Detections, Picture, host_array

Counter = Callable[[str, str, str, str], None]  # stream, classifier, head, label
# what a check sees of each model call's share of a frame: the stream, the frame's index,
# the classifier, the boxes, the tensor the model was fed for them and its answers
Tap = Callable[[str, int, Classifier, np.ndarray, np.ndarray, list[Answer]], None]


@dataclass(slots=True)
class Job:
    """One detected frame of a stream with classifiers: its picture and tracked boxes."""

    stream: str
    frame: int  # its index in the stream
    attributes: TrackAttributes
    image: Picture  # the full picture (H, W, 3) RGB the boxes refer to
    detections: Detections
    now: float  # the frame's time on its stream's timeline


def classify(jobs: list[Job], on_answer: Counter | None = None, tap: Tap | None = None
             ) -> float:
    """Answer every job's requests, one model call per classifier (in batches of its
    ``MAX_BATCH``); returns the seconds it took (0 when nothing was to be classified)."""
    start = time.perf_counter()
    pending: dict[int, list[tuple[Job, Request, np.ndarray]]] = {}
    for job in jobs:
        requests = job.attributes.wanted(job.detections, job.now)
        if not requests:
            continue
        image = host_array(job.image)
        for request in requests:
            classifier = job.attributes.entries[request.classifier][1]
            pending.setdefault(id(classifier), []).append(
                (job, request, crops_tensor(image, request.boxes, classifier.spec)))
    if not pending:
        return 0.0
    for group in pending.values():
        first_job, first_request, _ = group[0]
        classifier = first_job.attributes.entries[first_request.classifier][1]
        answers = classifier.answer(np.concatenate([t for _, _, t in group]))
        at = 0
        for job, request, tensor in group:
            mine = answers[at:at + len(tensor)]
            at += len(tensor)
            job.attributes.record(request, mine)
            if tap is not None:
                tap(job.stream, job.frame, classifier, request.boxes, tensor, mine)
            if on_answer is not None:
                for answer in mine:
                    for head, (label, _) in answer.items():
                        on_answer(job.stream, classifier.name, head, label)
    return time.perf_counter() - start
