"""``vidpipe demo``: make the demo clip (once), run the shipped person model on it, and score
the detections against the clip's ground truth."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from pipelines.synthetic.demo import make_demo_clip
from pipelines.synthetic.hard import make_hard_clip
from pipelines.synthetic.truth import load_truth, truth_path


@dataclass(frozen=True, slots=True)
class PersonScore:
    """How well per-frame person detections match a clip's person / no-person truth."""

    person_frames: int
    person_hits: int  # person frames with a person detection >= threshold
    empty_frames: int
    false_hits: int  # frames without a person that still got one
    missing_lines: int  # truth frames with no JSONL line at all

    @property
    def hit_rate(self) -> float:
        return self.person_hits / self.person_frames if self.person_frames else float("nan")

    @property
    def false_rate(self) -> float:
        return self.false_hits / self.empty_frames if self.empty_frames else float("nan")


DEMO_CLIP = Path("build/demo/clip.mp4")  # the demo clip, made once where benches need it


def ensure_demo_clip(clip: Path, console: Console, seed: int = 0, *,
                     hard: bool = False) -> Path:
    """The demo clip (``hard``: the harder one) at ``clip``, made unless it and its truth file
    already exist (the truth is written last, so a clip whose making was interrupted is made
    again)."""
    if clip.is_file() and truth_path(clip).is_file():
        return clip
    clip.parent.mkdir(parents=True, exist_ok=True)
    make = make_hard_clip if hard else make_demo_clip
    with Progress(console=console) as progress:
        task = progress.add_task(f"making the {'harder ' if hard else ''}demo clip", total=None)
        make(clip, seed=seed,
             progress=lambda done, total: progress.update(task, completed=done, total=total))
    return clip


def score_person_frames(lines: Iterable[dict[str, Any]], truth: dict[str, Any], *,
                        label: str = "person", threshold: float = 0.5) -> PersonScore:
    """Compare JSONL detection lines of one stream with the truth's per-frame person labels."""
    detected: dict[int, bool] = {}
    for line in lines:
        detected[line["frame"]] = any(d["label"] == label and d["score"] >= threshold
                                      for d in line["detections"])
    labels: list[bool] = truth["person"]
    person = [i for i, p in enumerate(labels) if p]
    empty = [i for i, p in enumerate(labels) if not p]
    return PersonScore(
        person_frames=len(person), person_hits=sum(detected.get(i, False) for i in person),
        empty_frames=len(empty), false_hits=sum(detected.get(i, False) for i in empty),
        missing_lines=sum(i not in detected for i in range(len(labels))),
    )


def score_run(detections: Path, clip: Path) -> PersonScore:
    lines = [json.loads(line) for line in detections.read_text().splitlines()]
    return score_person_frames(lines, load_truth(clip))
