"""The photographs the generated clips are made of: bundled with scikit-image, so nothing
is downloaded; which show a person; and ``natural_picture``, one at any size for fidelity
tests."""

from __future__ import annotations

from functools import cache

import cv2
import numpy as np

PERSON_PHOTOS: tuple[str, ...] = ("astronaut", "camera")
NON_PERSON_PHOTOS: tuple[str, ...] = ("coffee", "chelsea", "rocket")
PHOTOS: tuple[str, ...] = PERSON_PHOTOS + NON_PERSON_PHOTOS
# Every photograph the generators draw: the labelled ones, and backdrops only (no person).
ALL_PHOTOS: tuple[str, ...] = PHOTOS + ("hubble_deep_field",)
BACKDROP_TURN = 10.0  # degrees a backdrop is turned by at most


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


def placement(photo: np.ndarray, centre: tuple[float, float], height: float,
               angle: float) -> np.ndarray:
    """The affine map that draws ``photo`` ``height`` pixels tall, turned by ``angle``
    degrees, centred on ``centre`` (frame pixels)."""
    ph, pw = photo.shape[:2]
    warp = cv2.getRotationMatrix2D((pw / 2, ph / 2), angle, height / ph)
    warp[:, 2] += (centre[0] - pw / 2, centre[1] - ph / 2)
    return warp


def filled(photo: str, size: tuple[int, int], centre: tuple[float, float], zoom: float,
            angle: float) -> np.ndarray:
    """A ``size`` (width, height) picture filled with ``photo``: ``zoom`` times the size that
    covers it, turned by ``angle``, centred on ``centre``; mirrored where it runs out."""
    image = load_photo(photo)
    width, height = size
    tall = zoom * max(height, width * image.shape[0] / image.shape[1])
    return cv2.warpAffine(image, placement(image, centre, tall, angle), size,
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def natural_picture(size: tuple[int, int], seed: int) -> np.ndarray:
    """A photograph (one of scikit-image's, by seed) zoomed, panned and turned to fill a
    ``size`` (width, height) picture: natural content at any size, for fidelity tests."""
    rng = np.random.default_rng([seed, 7])
    width, height = size
    zoom = float(rng.uniform(1.0, 1.6))
    centre = (width / 2 + float(rng.uniform(-0.1, 0.1)) * width,
              height / 2 + float(rng.uniform(-0.1, 0.1)) * height)
    return filled(ALL_PHOTOS[seed % len(ALL_PHOTOS)], size, centre, zoom,
                   float(rng.uniform(-BACKDROP_TURN, BACKDROP_TURN)))
