"""Generated media for demos and tests, so that nothing is ever downloaded.

``make_demo_clip`` pans and zooms (Ken Burns) over real photographs bundled with scikit-image,
alternating shots that show a person with shots that do not, joined by hard cuts so that every
frame is unambiguously one or the other. Its ground truth is written next to it, and is what the
acceptance check scores a real detector against. ``make_hard_clip`` is harder: turned and
zoomed photographs with others inset on them, people smaller in some shots.
``natural_picture`` is one such photograph at any size, for fidelity tests. ``make_test_clip``
makes tiny clips of moving rectangles for fast pipeline tests, in any of the codecs the
decoders must handle.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

PERSON_PHOTOS: tuple[str, ...] = ("astronaut", "camera")
NON_PERSON_PHOTOS: tuple[str, ...] = ("coffee", "chelsea", "rocket")
PHOTOS: tuple[str, ...] = PERSON_PHOTOS + NON_PERSON_PHOTOS
# Every photograph the generators draw: the labelled ones, and backdrops only (no person).
ALL_PHOTOS: tuple[str, ...] = PHOTOS + ("hubble_deep_field",)

# About 1.7 s a shot lets a 20 s clip show every photo at least twice while alternating kinds.
SHOT_SECONDS = 1.7
SHOT_JITTER = 0.2  # each shot's length varies by up to this fraction of the mean
ZOOM_NEAR = (1.0, 1.08)  # the wide end of a shot's zoom; 1.0 = photo as tall as the frame
ZOOM_FAR = (1.15, 1.25)  # the close end: modest, so the person stays whole in frame
PAN_SLACK = 0.06  # fraction of the frame width a photo may drift into the dark side bars
BACKGROUND = (18, 18, 18)  # plain dark: nothing in it a detector could mistake for a person

ENCODERS = {"h264": "libx264", "hevc": "libx265", "mpeg4": "mpeg4"}
ProgressFn = Callable[[int, int], None]


def photo_has_person(photo: str) -> bool:
    """Whether a bundled photo shows a person: the label every frame of its shots inherits."""
    if photo not in PHOTOS:
        raise ValueError(f"unknown photo {photo!r}; expected one of {PHOTOS}")
    return photo in PERSON_PHOTOS


@cache
def load_photo(photo: str) -> np.ndarray:
    """The bundled photo as HWC uint8 RGB; ``camera`` is grayscale and gets three channels."""
    if photo not in ALL_PHOTOS:
        raise ValueError(f"unknown photo {photo!r}; expected one of {ALL_PHOTOS}")
    import skimage.data  # tens of MB, for a photograph: only when one is asked for

    image = getattr(skimage.data, photo)()
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


@dataclass(frozen=True, slots=True)
class Shot:
    """One segment between hard cuts: a photo and the camera move across it.

    Zooms are relative to the photo scaled to the frame height. Offsets are in [-1, 1], a fraction
    of how far the photo may move at that moment without uncovering the frame top or bottom.
    """

    photo: str
    first_frame: int
    last_frame: int
    zoom: tuple[float, float]
    offset_from: tuple[float, float]
    offset_to: tuple[float, float]

    @property
    def person(self) -> bool:
        return photo_has_person(self.photo)

    @property
    def frame_count(self) -> int:
        return self.last_frame - self.first_frame + 1


def plan_shots(frame_count: int, fps: int, seed: int) -> list[Shot]:
    """Cut ``frame_count`` frames into shots that alternate person / no person, from the seed.

    Each photo's successive appearances alternate zooming in and out, so a photo never repeats
    the same motion.
    """
    rng = np.random.default_rng(seed)
    count = max(1, min(frame_count, round(frame_count / (fps * SHOT_SECONDS))))
    lengths = _shot_lengths(frame_count, count, rng)
    photos = _photo_order(count, rng)
    seen: Counter[str] = Counter()
    shots, first = [], 0
    for photo, length in zip(photos, lengths, strict=True):
        zoom_in = seen[photo] % 2 == 0
        seen[photo] += 1
        shots.append(_shot(photo, first, first + length - 1, zoom_in, rng))
        first += length
    return shots


def _shot_lengths(frame_count: int, count: int, rng: np.random.Generator) -> list[int]:
    """Near-equal lengths that differ a little, so that cuts do not fall on a regular beat."""
    weights = 1.0 + rng.uniform(-SHOT_JITTER, SHOT_JITTER, count)
    cuts = np.round(np.cumsum(weights) / weights.sum() * frame_count).astype(int)
    return [int(n) for n in np.diff(cuts, prepend=0)]


def _photo_order(count: int, rng: np.random.Generator) -> list[str]:
    """Alternate person and non-person photos, each kind cycling through all of its photos."""
    decks: dict[bool, list[str]] = {True: [], False: []}
    order = []
    for index in range(count):
        person = index % 2 == 0
        if not decks[person]:
            pool = PERSON_PHOTOS if person else NON_PERSON_PHOTOS
            decks[person] = [pool[i] for i in rng.permutation(len(pool))]
        order.append(decks[person].pop())
    return order


def _shot(photo: str, first: int, last: int, zoom_in: bool, rng: np.random.Generator) -> Shot:
    near, far = float(rng.uniform(*ZOOM_NEAR)), float(rng.uniform(*ZOOM_FAR))
    start = rng.uniform(-1.0, 1.0, 2)
    end = -start * rng.uniform(0.5, 1.0, 2)  # pan across the photo, not back and forth
    return Shot(
        photo, first, last, (near, far) if zoom_in else (far, near),
        (float(start[0]), float(start[1])), (float(end[0]), float(end[1])),
    )


def render_shot_frame(shot: Shot, index: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``index`` (absolute) of a shot as HWC uint8 RGB: one affine warp of the photo."""
    width, height = size
    photo = load_photo(shot.photo)
    ph, pw = photo.shape[:2]
    t = (index - shot.first_frame) / max(1, shot.frame_count - 1)
    t = t * t * (3.0 - 2.0 * t)  # ease in and out, as a camera operator would
    zoom = shot.zoom[0] + (shot.zoom[1] - shot.zoom[0]) * t
    scale = zoom * (height + 2) / ph  # 1 px overscan: no border line at the top and bottom
    fx, fy = (a + (b - a) * t for a, b in zip(shot.offset_from, shot.offset_to, strict=True))
    room_x = max(0.0, (scale * pw - width) / 2) + PAN_SLACK * width
    room_y = max(0.0, (scale * ph - height) / 2)
    cx, cy = width / 2 + fx * room_x, height / 2 + fy * room_y
    warp = np.array([[scale, 0, cx - scale * pw / 2], [0, scale, cy - scale * ph / 2]])
    return cv2.warpAffine(photo, warp, (width, height), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=BACKGROUND)


def make_demo_clip(path: Path, *, seconds: float = 20.0, fps: int = 30,
                   size: tuple[int, int] = (1280, 720), seed: int = 0,
                   progress: ProgressFn | None = None, camera_like: bool = False) -> Path:
    """Write the person / no-person demo clip (H.264 MP4) and its ``.truth.json``; return path.

    ``camera_like`` encodes as a live camera does — no B-frames, so no frame waits in the decoder
    for a later one, and a key frame every 2 s (a common camera default) — which a live
    benchmark needs."""
    path = Path(path)
    frame_count = _frame_count(seconds, fps, size)
    shots = plan_shots(frame_count, fps, seed)
    frames = (render_shot_frame(s, i, size) for s in shots
              for i in range(s.first_frame, s.last_frame + 1))
    encode(path, frames, fps=fps, size=size, codec="h264", total=frame_count, progress=progress,
           camera_like=camera_like)
    truth = truth_record(path.name, shots, fps, size)
    truth_path(path).write_text(json.dumps(truth, indent=1) + "\n")
    return path


def truth_record(clip: str, shots: list[Shot], fps: int, size: tuple[int, int]) -> dict[str, Any]:
    """The ground truth of a demo clip: its shots, and one person / no-person label per frame."""
    person = [s.person for s in shots for _ in range(s.frame_count)]
    segments = [{"photo": s.photo, "person": s.person, "first_frame": s.first_frame,
                 "last_frame": s.last_frame} for s in shots]
    return {"clip": clip, "fps": fps, "width": size[0], "height": size[1],
            "frame_count": len(person), "segments": segments, "person": person}


def truth_path(clip: Path) -> Path:
    """Where a clip's ground truth lives: ``demo.mp4`` -> ``demo.truth.json``."""
    return Path(clip).with_suffix(".truth.json")


def load_truth(path: Path) -> dict[str, Any]:
    """Read a ground truth, given the clip or the truth file, and check that it hangs together."""
    path = Path(path)
    if not path.name.endswith(".truth.json"):
        path = truth_path(path)
    truth = json.loads(path.read_text())
    person, count = truth.get("person"), truth.get("frame_count")
    if not isinstance(person, list) or len(person) != count:
        got = len(person) if isinstance(person, list) else type(person).__name__
        raise ValueError(f"{path}: 'person' must hold one label per frame ({count}), got {got}")
    expected = 0
    for segment in truth["segments"]:
        if segment["first_frame"] != expected:
            raise ValueError(f"{path}: segment {segment} should start at frame {expected}")
        expected = segment["last_frame"] + 1
    if expected != count:
        raise ValueError(f"{path}: segments cover {expected} frames, frame_count is {count}")
    return truth


# The harder clip: every frame a photograph (rotated, zoomed, panned) with others inset on
# it, people among them in half the shots, some of them small.
BACKDROPS: tuple[str, ...] = ("coffee", "chelsea", "rocket", "hubble_deep_field")
# An inset's height as a fraction of the frame's. The shipped person detector finds the
# people of these photos from about half the frame's height (below 0.45 it scores them under
# 0.35), so "small" people are drawn at the edge of what it sees: where preprocessing matters.
PERSON_HEIGHT = (0.75, 1.0)
SMALL_PERSON_HEIGHT = (0.55, 0.75)
THING_HEIGHT = (0.22, 0.5)
INSET_TURN = 10.0  # degrees an inset is turned by at most
BACKDROP_TURN = 10.0
HARD_SHOT_SECONDS = 1.5


def _placement(photo: np.ndarray, centre: tuple[float, float], height: float,
               angle: float) -> np.ndarray:
    """The affine map that draws ``photo`` ``height`` pixels tall, turned by ``angle``
    degrees, centred on ``centre`` (frame pixels)."""
    ph, pw = photo.shape[:2]
    warp = cv2.getRotationMatrix2D((pw / 2, ph / 2), angle, height / ph)
    warp[:, 2] += (centre[0] - pw / 2, centre[1] - ph / 2)
    return warp


def _filled(photo: str, size: tuple[int, int], centre: tuple[float, float], zoom: float,
            angle: float) -> np.ndarray:
    """A ``size`` (width, height) picture filled with ``photo``: ``zoom`` times the size that
    covers it, turned by ``angle``, centred on ``centre``; mirrored where it runs out."""
    image = load_photo(photo)
    width, height = size
    tall = zoom * max(height, width * image.shape[0] / image.shape[1])
    return cv2.warpAffine(image, _placement(image, centre, tall, angle), size,
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def natural_picture(size: tuple[int, int], seed: int) -> np.ndarray:
    """A photograph (one of scikit-image's, by seed) zoomed, panned and turned to fill a
    ``size`` (width, height) picture: natural content at any size, for fidelity tests."""
    rng = np.random.default_rng([seed, 7])
    width, height = size
    zoom = float(rng.uniform(1.0, 1.6))
    centre = (width / 2 + float(rng.uniform(-0.1, 0.1)) * width,
              height / 2 + float(rng.uniform(-0.1, 0.1)) * height)
    return _filled(ALL_PHOTOS[seed % len(ALL_PHOTOS)], size, centre, zoom,
                   float(rng.uniform(-BACKDROP_TURN, BACKDROP_TURN)))


@dataclass(frozen=True, slots=True)
class Inset:
    """A photograph laid on a shot's backdrop, moving and turning over the shot."""

    photo: str
    height: float  # fraction of the frame height
    centre_from: tuple[float, float]  # fractions of the frame size
    centre_to: tuple[float, float]
    angle_from: float
    angle_to: float


@dataclass(frozen=True, slots=True)
class HardShot:
    """A backdrop photograph, turned and zoomed over the shot, with insets on it."""

    backdrop: str
    first_frame: int
    last_frame: int
    zoom: tuple[float, float]
    angle: tuple[float, float]
    insets: tuple[Inset, ...]

    @property
    def person(self) -> bool:
        return any(photo_has_person(i.photo) for i in self.insets)

    @property
    def frame_count(self) -> int:
        return self.last_frame - self.first_frame + 1


def plan_hard_shots(frame_count: int, fps: int, seed: int) -> list[HardShot]:
    """Shots alternating people / none, each with one or two insets; every second person shot
    shows them small (``SMALL_PERSON_HEIGHT``)."""
    rng = np.random.default_rng([seed, 3])
    count = max(1, min(frame_count, round(frame_count / (fps * HARD_SHOT_SECONDS))))
    lengths = _shot_lengths(frame_count, count, rng)
    shots, first = [], 0
    for index, length in enumerate(lengths):
        person = index % 2 == 0
        heights = (SMALL_PERSON_HEIGHT if index % 4 == 2 else PERSON_HEIGHT) if person \
            else THING_HEIGHT
        pool = PERSON_PHOTOS if person else NON_PERSON_PHOTOS
        insets = [_inset(pool[int(rng.integers(len(pool)))], heights, rng)]
        if rng.uniform() < 0.5:  # a second photograph, never of a person, drawn beneath
            insets.insert(0, _inset(NON_PERSON_PHOTOS[int(rng.integers(len(NON_PERSON_PHOTOS)))],
                                    THING_HEIGHT, rng))
        backdrop = BACKDROPS[int(rng.integers(len(BACKDROPS)))]
        zoom = (float(rng.uniform(1.0, 1.15)), float(rng.uniform(1.15, 1.4)))
        angle = tuple(float(a) for a in rng.uniform(-BACKDROP_TURN, BACKDROP_TURN, 2))
        shots.append(HardShot(backdrop, first, first + length - 1,
                              zoom if index % 3 else zoom[::-1], angle,  # type: ignore[arg-type]
                              tuple(insets)))
        first += length
    return shots


def _inset(photo: str, heights: tuple[float, float], rng: np.random.Generator) -> Inset:
    height = float(rng.uniform(*heights))
    # centres keep most of the turned inset in the frame (at the frame's 16:9)
    margin_y = min(0.5, 0.5 * height * 1.1)
    margin_x = margin_y * 9 / 16

    def point() -> tuple[float, float]:
        return (float(rng.uniform(margin_x, 1 - margin_x)),
                float(rng.uniform(margin_y, max(margin_y, 1 - margin_y))))

    angles = rng.uniform(-INSET_TURN, INSET_TURN, 2)
    return Inset(photo, height, point(), point(), float(angles[0]), float(angles[1]))


def render_hard_frame(shot: HardShot, index: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``index`` (absolute) of a hard shot as HWC uint8 RGB."""
    width, height = size
    t = (index - shot.first_frame) / max(1, shot.frame_count - 1)
    t = t * t * (3.0 - 2.0 * t)

    def at(pair: tuple[float, float]) -> float:
        return pair[0] + (pair[1] - pair[0]) * t

    frame = _filled(shot.backdrop, size, (width / 2, height / 2), at(shot.zoom) * 1.2,
                    at(shot.angle))
    for inset in shot.insets:
        photo = load_photo(inset.photo)
        centre = (at((inset.centre_from[0], inset.centre_to[0])) * width,
                  at((inset.centre_from[1], inset.centre_to[1])) * height)
        warp = _placement(photo, centre, inset.height * height,
                          at((inset.angle_from, inset.angle_to)))
        cv2.warpAffine(photo, warp, (width, height), dst=frame, flags=cv2.INTER_AREA,
                       borderMode=cv2.BORDER_TRANSPARENT)
    return frame


def make_hard_clip(path: Path, *, seconds: float = 20.0, fps: int = 30,
                   size: tuple[int, int] = (1280, 720), seed: int = 0,
                   progress: ProgressFn | None = None) -> Path:
    """Write the harder person / no-person clip (H.264 MP4) and its ``.truth.json``: turned,
    zoomed photographs with photographs inset on them, people in every second shot, smaller
    in every fourth. Same truth format as the demo clip's; segments name their photos."""
    path = Path(path)
    frame_count = _frame_count(seconds, fps, size)
    shots = plan_hard_shots(frame_count, fps, seed)
    frames = (render_hard_frame(s, i, size) for s in shots
              for i in range(s.first_frame, s.last_frame + 1))
    encode(path, frames, fps=fps, size=size, codec="h264", total=frame_count, progress=progress)
    segments = [{"photos": [s.backdrop, *(i.photo for i in s.insets)], "person": s.person,
                 "small": s.person and min(i.height for i in s.insets
                                           if photo_has_person(i.photo)) < PERSON_HEIGHT[0],
                 "first_frame": s.first_frame, "last_frame": s.last_frame} for s in shots]
    truth = {"clip": path.name, "fps": fps, "width": size[0], "height": size[1],
             "frame_count": frame_count, "segments": segments,
             "person": [s.person for s in shots for _ in range(s.frame_count)]}
    truth_path(path).write_text(json.dumps(truth, indent=1) + "\n")
    return path


def make_test_clip(path: Path, *, frames: int = 30, size: tuple[int, int] = (320, 240),
                   fps: int = 30, codec: str = "h264", seed: int = 0) -> Path:
    """Write a tiny MP4 of coloured rectangles moving over texture: exactly ``frames`` frames."""
    if codec not in ENCODERS:
        raise ValueError(f"codec must be one of {sorted(ENCODERS)}, got {codec!r}")
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    _check_size(size)
    path = Path(path)
    encode(path, moving_rectangles(frames, size, seed), fps=fps, size=size, codec=codec,
           total=frames)
    return path


def moving_rectangles(frames: int, size: tuple[int, int], seed: int) -> Iterator[np.ndarray]:
    """Frames of a few solid rectangles bouncing over a fixed, blurred-noise texture."""
    width, height = size
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    texture = cv2.GaussianBlur(noise, (0, 0), 3)  # texture gives the encoder real work to do
    boxes = [(rng.uniform(0, width), rng.uniform(0, height), rng.uniform(-6, 6),
              rng.uniform(-6, 6), tuple(int(c) for c in rng.integers(0, 256, 3)))
             for _ in range(3)]
    box_w, box_h = max(2, width // 6), max(2, height // 6)
    for index in range(frames):
        image = texture.copy()
        for x0, y0, vx, vy, colour in boxes:
            x = int(_bounce(x0 + vx * index, width - box_w))
            y = int(_bounce(y0 + vy * index, height - box_h))
            image[y:y + box_h, x:x + box_w] = colour
        yield image


def _bounce(position: float, span: int) -> float:
    """Reflect a position off the walls at 0 and ``span``."""
    if span <= 0:
        return 0.0
    period = position % (2 * span)
    return period if period <= span else 2 * span - period


def encode(path: Path, frames: Iterable[np.ndarray], *, fps: int, size: tuple[int, int],
           codec: str, total: int, progress: ProgressFn | None = None,
           camera_like: bool = False) -> None:
    """Encode RGB frames to an MP4, flushing the encoder so that no delayed frame is lost."""
    options = _encoder_options(codec)
    if camera_like and codec == "h264":
        options["tune"] = "zerolatency"
        options["g"] = str(2 * fps)  # cameras send a key frame every 1-2 s, x264 every 250
    with av.open(str(path), "w") as container:
        stream = container.add_stream(ENCODERS[codec], rate=fps, options=options)
        if not isinstance(stream, av.VideoStream):  # cannot happen; tells the type checker
            raise TypeError(f"{ENCODERS[codec]} made a {type(stream).__name__}, not video")
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
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


def _frame_count(seconds: float, fps: int, size: tuple[int, int]) -> int:
    """How many frames a clip of ``seconds`` at ``fps`` holds; refuses sizes and lengths no
    clip can have."""
    _check_size(size)
    frame_count = round(seconds * fps)
    if frame_count < 1:
        raise ValueError(f"seconds * fps must give at least one frame, got {seconds} * {fps}")
    return frame_count


def _check_size(size: tuple[int, int]) -> None:
    width, height = size
    if width < 16 or height < 16 or width % 2 or height % 2:
        raise ValueError(f"size must be even and at least 16x16 (yuv420p), got {size}")
