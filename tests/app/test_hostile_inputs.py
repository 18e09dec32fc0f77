"""Inputs that used to crash (issue 22, items 3 and 6): a video whose metadata tag is not
UTF-8, a URL holding NUL, a broken IPv6 literal. Each is handled: played, or refused with 400."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api import create_app
from app.config import ServiceConfig
from pipelines.sources.file import FileSource
from pipelines.sources.synthetic import make_test_clip
from tests.support.cli import vidpipe
from tests.support.media import remux


@pytest.fixture
def latin1_tagged(tmp_path: Path) -> Path:
    """A clip whose title tag holds a Latin-1 byte: the video is intact."""
    clean = make_test_clip(tmp_path / "clean.mp4", frames=12)
    tagged = remux(clean, tmp_path / "tagged.mp4", metadata={"title": "vidpipe-tag"})
    data = tagged.read_bytes()
    assert data.count(b"vidpipe-tag") == 1
    tagged.write_bytes(data.replace(b"vidpipe-tag", b"vidpipe-t\xe9g"))
    return tagged


def test_a_tag_that_is_not_utf8_does_not_stop_a_run(latin1_tagged: Path, tmp_path: Path):
    with FileSource(latin1_tagged) as source:
        assert source.frame_count == 12
    code, output = vidpipe("run", latin1_tagged, "--out", tmp_path / "out")
    assert code == 0, output
    lines = (tmp_path / "out" / "detections.jsonl").read_text().splitlines()
    assert [json.loads(x)["frame"] for x in lines] == list(range(12))


@pytest.mark.parametrize(("url", "text"), [
    ("rtsp://admin:pw@[::1/s", "malformed URL"),
    ("rtsp://cam/s\x00x", "control character"),
    ("MEDIA/cam\x00.mp4", "control character"),
    ("rtsp://admin:pw#x@cam/s", "malformed"),
])
def test_malformed_urls_are_a_400_not_a_500(tmp_path: Path, latin1_tagged: Path, url, text):
    config = ServiceConfig(media_roots=[tmp_path], results_dir=tmp_path / "results")
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        answer = client.post("/api/streams", json={"url": url.replace("MEDIA", str(tmp_path))})
        assert answer.status_code == 400, answer.text
        assert text in answer.text and "pw" not in answer.text.replace("pw=***", "")
        tagged = client.post("/api/streams", json={"url": str(latin1_tagged)})
        assert tagged.status_code == 201, tagged.text
