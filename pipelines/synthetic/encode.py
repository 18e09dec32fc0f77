"""Frames to an MP4 with PyAV, fast enough for 2 CPU cores, and the sizes a clip can have."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import av
import numpy as np

ENCODERS = {"h264": "libx264", "hevc": "libx265", "mpeg4": "mpeg4"}
ProgressFn = Callable[[int, int], None]


def encode(path: Path, frames: Iterable[np.ndarray], *, fps: int, size: tuple[int, int],
           codec: str, total: int, progress: ProgressFn | None = None,
           camera_like: bool = False, max_kbps: int | None = None,
           colour: tuple[int, int] | None = None) -> None:
    """Encode RGB frames to an MP4, flushing the encoder so that no delayed frame is lost.
    ``max_kbps`` caps the bitrate, as a camera's "variable bitrate, at most" setting does
    (x264's quality target then gives way where the cap binds: a noisy picture). ``colour``
    tags the stream with an (AVColorSpace, AVColorRange) pair, as cameras tag theirs (1, 1:
    BT.709, limited range); a decoder converts tagged frames with that matrix and range.
    The folder is made if it is missing."""
    options = _encoder_options(codec)
    if camera_like and codec == "h264":
        options["tune"] = "zerolatency"
        options["g"] = str(2 * fps)  # cameras send a key frame every 1-2 s, x264 every 250
    if max_kbps is not None:
        if codec != "h264":
            raise ValueError(f"a bitrate cap is made for h264 only, not {codec}")
        options.update(maxrate=f"{max_kbps}k", bufsize=f"{2 * max_kbps}k")  # 2 s of buffer
    path.parent.mkdir(parents=True, exist_ok=True)  # build/demo on a fresh checkout
    with av.open(str(path), "w") as container:
        stream = container.add_stream(ENCODERS[codec], rate=fps, options=options)
        if not isinstance(stream, av.VideoStream):  # cannot happen; tells the type checker
            raise TypeError(f"{ENCODERS[codec]} made a {type(stream).__name__}, not video")
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        if colour is not None:
            stream.codec_context.colorspace, stream.codec_context.color_range = colour
        for done, rgb in enumerate(frames, start=1):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            container.mux(stream.encode(frame))
            if progress is not None:
                progress(done, total)
        container.mux(stream.encode(None))


def _encoder_options(codec: str) -> dict[str, str]:
    """Fast settings: these clips exist to be decoded, and 2 CPU cores must make them in seconds."""
    if codec == "h264":
        return {"preset": "veryfast", "crf": "20"}
    if codec == "hevc":
        # No thread pool: x265's threads made a one-frame clip come out empty under load.
        # No B-frames: with them a one-frame clip's packet now and then left x265 with no
        # decode timestamp set under load (25 of 60 clips, both cores busy), and the MP4
        # muxer refused it ('pts/dts pair unsupported').
        return {"preset": "ultrafast", "crf": "26",
                "x265-params": "log-level=error:pools=none:frame-threads=1:bframes=0"}
    return {"qscale": "4"}


def frame_count_of(seconds: float, fps: int, size: tuple[int, int]) -> int:
    """How many frames a clip of ``seconds`` at ``fps`` holds; refuses sizes and lengths no
    clip can have."""
    check_size(size)
    frame_count = round(seconds * fps)
    if frame_count < 1:
        raise ValueError(f"seconds * fps must give at least one frame, got {seconds} * {fps}")
    return frame_count


def check_size(size: tuple[int, int]) -> None:
    """Refuse a size yuv420p cannot hold."""
    width, height = size
    if width < 16 or height < 16 or width % 2 or height % 2:
        raise ValueError(f"size must be even and at least 16x16 (yuv420p), got {size}")
