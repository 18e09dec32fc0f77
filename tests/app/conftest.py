"""Fixtures the service's tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def media_root(small_clip, tmp_path):
    """A media root holding the small clip as ``cam.mp4``."""
    root = tmp_path / "media"
    root.mkdir()
    (root / "cam.mp4").write_bytes(small_clip.read_bytes())
    return root
