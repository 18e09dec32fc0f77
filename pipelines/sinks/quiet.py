"""A quiet camera's lines: the frames motion gating skipped, in a row, written as one line.

A gated camera that shows nothing skips nearly every frame; a line for each (no boxes, the
same counts) is most of what it writes. ``fold`` marks, in the results of one run of skipped
frames (``decode.selection``: at most a second of a stream), every quiet result but the last
as ``folded`` and gives the last its ``skipped_run``; the line writers leave folded results
out and write the last one's line with ``"skipped_run": {"frame", "pts", "frames"}`` — the
frames it stands for, from the first one's index and pts through its own. A result is quiet
when motion gating skipped it, nothing happened on it (no event, no box, no gap before it)
and it follows the one before it. ``unfold`` gives the lines back one per frame (pts spread
evenly between the first and the last), so ``vidpipe replay`` counts what the run counted;
``--every-line`` (``every_line`` in the service's config) writes every frame's line instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipelines.frame import Result

KEY = "skipped_run"


@dataclass(frozen=True, slots=True)
class SkippedRun:
    """The skipped frames one line stands for: ``frames`` of them, in a row, from frame
    ``first`` at ``first_pts`` through the line's own."""

    first: int
    first_pts: float | None
    frames: int

    def __post_init__(self) -> None:
        if self.frames < 2 or self.first < 0:
            raise ValueError(f"a skipped run is 2 or more frames from an index >= 0, got "
                             f"{self.frames} from {self.first}")


def fold(results: list[Result]) -> list[Result]:
    """``results`` (one stream's, in frame order) with each stretch of two or more quiet
    results in a row folded into its last; the same list, its results marked."""
    stretch: list[Result] = []
    for result in results:
        quiet = _quiet(result)
        if quiet and stretch and _follows(stretch[-1], result):
            stretch.append(result)
            continue
        _close(stretch)
        stretch = [result] if quiet else []
    _close(stretch)
    return results


def _quiet(result: Result) -> bool:
    frame = result.frame
    return bool(frame.skipped) and not result.predicted and not result.events \
        and not len(result.detections) and frame.gap_s is None


def _follows(before: Result, after: Result) -> bool:
    a, b = before.frame, after.frame
    return b.index == a.index + 1 and b.skipped == a.skipped and b.model == a.model


def _close(stretch: list[Result]) -> None:
    if len(stretch) < 2:
        return
    first = stretch[0].frame
    for result in stretch[:-1]:
        result.folded = True
    stretch[-1].skipped_run = SkippedRun(first.index, first.pts, len(stretch))


def run_record(run: SkippedRun) -> dict[str, Any]:
    """The line's ``skipped_run``."""
    return {"frame": run.first, "pts": None if run.first_pts is None else
            round(run.first_pts, 6), "frames": run.frames}


def unfold(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A detection line as the lines of every frame it stands for, in order: the line itself
    (less its ``skipped_run``) for most; ValueError for a run that does not add up."""
    run = record.get(KEY)
    if run is None:
        return [record]
    first, frames = int(run["frame"]), int(run["frames"])
    last = int(record["frame"])
    if frames < 2 or last - first + 1 != frames:
        raise ValueError(f"{KEY} of {frames} frames from frame {first} does not end at "
                         f"frame {last}")
    start, end = run.get("pts"), record.get("pts")
    lines = []
    for k in range(frames - 1):
        pts = None if start is None or end is None else \
            round(start + (end - start) * k / (frames - 1), 6)
        line = {"stream": record["stream"], "frame": first + k, "pts": pts,
                "detections": [], "skipped": record.get("skipped")}
        lines.append(line | ({"model": record["model"]} if "model" in record else {}))
    own = {k: v for k, v in record.items() if k != KEY}
    return [*lines, own]


def frame_records(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Detection lines (a file's, a feed's) as one record per frame, in order."""
    return [record for text in lines if text.strip() for record in unfold(json.loads(text))]
