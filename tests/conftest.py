import os
from pathlib import Path

import pytest

from pipelines.sources.synthetic import make_test_clip


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without CUDA, and fail instead when REQUIRE_GPU=1."""
    if os.environ.get("REQUIRE_GPU") == "1":
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (set REQUIRE_GPU=1 to fail instead)")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def small_clip(media) -> Path:
    """60 frames of 320x240 H.264."""
    return make_test_clip(media / "small.mp4", frames=60, size=(320, 240))


@pytest.fixture(scope="session")
def wide_clip(media) -> Path:
    """45 frames of 400x160 H.264: an odd aspect ratio."""
    return make_test_clip(media / "wide.mp4", frames=45, size=(400, 160), seed=3)


@pytest.fixture
def rtsp_servers():
    """Real GStreamer RTSP servers on 127.0.0.1 (tests/rtsp_fixtures.py), stopped at the end.
    Skips where Debian's GStreamer packages are missing; REQUIRE_RTSP=1 fails instead."""
    from tests.rtsp_fixtures import RtspServers, gstreamer_missing

    reason = gstreamer_missing()
    if reason is not None:
        if os.environ.get("REQUIRE_RTSP") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    with RtspServers() as servers:
        yield servers
