import os
import tempfile
from pathlib import Path

import pytest

from pipelines.synthetic.rectangles import make_test_clip
from tests.support.requires import required, unavailable

# Runs in the tests (and the processes they start) keep their plans in a cache of their own:
# never the user's, and fresh for every session.
os.environ["VIDPIPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="vidpipe-test-cache-")
# What services started outside a test (a module's fixture) remember: never the repository's
# ``state/``; each test gets a folder of its own (``_state_dir_of_its_own``).
os.environ["VIDPIPE_STATE_DIR"] = tempfile.mkdtemp(prefix="vidpipe-test-state-")


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without CUDA, and fail instead when REQUIRE_GPU=1."""
    if required("gpu"):
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


@pytest.fixture(autouse=True)
def _state_dir_of_its_own(tmp_path, monkeypatch):
    """Each test's services remember their streams and events in a folder of the test's own
    (``state_dir``'s default follows VIDPIPE_STATE_DIR): never the repository's ``state/``,
    and nothing carried from one test to the next."""
    monkeypatch.setenv("VIDPIPE_STATE_DIR", str(tmp_path / "state"))


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
        unavailable("rtsp", reason)
    with RtspServers() as servers:
        yield servers
