"""``vidpipe run --heatmap``: each tracked stream's heatmap (where its objects were) as a
PNG in the --out folder, over the file's first picture (grey, at the camera's size, for a
camera)."""

from __future__ import annotations

import logging
from pathlib import Path

import av
import numpy as np

from pipelines.analytics.stage import AnalyticsStage
from pipelines.pipeline import Pipeline
from pipelines.sinks.atomic import AtomicPath

log = logging.getLogger(__name__)


def heatmap_path(out: Path, sid: str, streams: int) -> Path:
    return out / ("heatmap.png" if streams == 1 else f"heatmap-{sid}.png")


def write_heatmaps(out: Path, pipeline: Pipeline, ids: list[str], files: dict[str, Path],
                   sizes: dict[str, tuple[int, int] | None]) -> list[Path]:
    """The tracked streams' heatmaps, written whole (a partial file renamed into place)."""
    stage = next((s for s in pipeline.stages if isinstance(s, AnalyticsStage)), None)
    written = []
    for sid, analytics in ({} if stage is None else stage.streams).items():
        path = heatmap_path(out, sid, len(ids))
        atomic = AtomicPath(path)
        atomic.partial.write_bytes(analytics.heatmap.png(_first_picture(files.get(sid)),
                                                         sizes.get(sid)))
        atomic.commit()
        written.append(path)
    return written


def _first_picture(file: Path | None) -> np.ndarray | None:
    """A file's first picture, RGB (None for none, or one that cannot be read again)."""
    if file is None:
        return None
    try:
        with av.open(str(file)) as container:
            frame = next(container.decode(video=0), None)
            return None if frame is None else frame.to_ndarray(format="rgb24")
    except (av.FFmpegError, OSError) as e:
        log.warning("heatmap of %s drawn on grey: its first picture could not be read (%s)",
                    file, e)
        return None
