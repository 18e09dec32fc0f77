"""Inputs that used to crash (issue 22, items 3 and 6): a video whose metadata tag is not
UTF-8, a URL holding NUL, a broken IPv6 literal. Each is handled: played, or refused with 400."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.service.api import create_app
from app.service.config import ServiceConfig
from pipelines.sources.file import FileSource
from pipelines.synthetic.rectangles import make_test_clip
from tests.support.api import LOCAL
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
    with TestClient(create_app(config), base_url=LOCAL,
                    raise_server_exceptions=False) as client:
        answer = client.post("/api/streams", json={"url": url.replace("MEDIA", str(tmp_path))})
        assert answer.status_code == 400, answer.text
        assert text in answer.text and "pw" not in answer.text.replace("pw=***", "")
        tagged = client.post("/api/streams", json={"url": str(latin1_tagged)})
        assert tagged.status_code == 201, tagged.text


def test_a_streams_model_is_a_zoo_name_or_under_a_model_root(tmp_path: Path, small_clip: Path):
    """Item 7: any path used to be taken, and a directory, a file and a missing path answered
    differently (a file-existence oracle). Now they get the same answer."""
    media, models = tmp_path / "media", tmp_path / "models"
    media.mkdir()
    (media / "cam.mp4").write_bytes(small_clip.read_bytes())
    own = models / "mine"
    own.mkdir(parents=True)
    zoo = Path(__file__).resolve().parents[2] / "models" / "zoo" / "shapes-yolo"
    for name in ("card.yaml", "model.onnx"):
        (own / name).write_bytes((zoo / name).read_bytes())
    config = ServiceConfig(media_roots=[media], model_roots=[models],
                           results_dir=tmp_path / "results", model="shapes-yolo")
    url = str(media / "cam.mp4")
    with TestClient(create_app(config), base_url=LOCAL,
                    raise_server_exceptions=False) as client:
        answers = [client.post("/api/streams", json={"url": url, "model": name})
                   for name in ("/etc", "/etc/hostname", "/no/such/model", "../../etc")]
        assert [a.status_code for a in answers] == [400] * 4
        details = [a.json()["detail"].split("'", 2)[2] for a in answers]
        assert len(set(details)) == 1, details  # the same words whatever the path is
        assert client.post("/api/streams", json={"url": url, "model": "shapes-yolo"}
                           ).status_code == 201
        assert client.post("/api/streams", json={"url": url, "model": str(own)}
                           ).status_code == 201


def test_a_playlist_under_a_media_root_cannot_reach_files_outside_it(tmp_path: Path):
    """Item 5: an HLS playlist inside a media root naming a file outside it was accepted (201)
    and played; FFmpeg is now told the demuxers a media-root file may use."""
    import av

    media, outside = tmp_path / "media", tmp_path / "outside"
    media.mkdir()
    outside.mkdir()
    clip = make_test_clip(outside / "secret.mp4", frames=10)
    segment = remux(clip, outside / "secret.ts", container="mpegts")
    playlist = media / "cam.m3u8"
    playlist.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:1.0,\n{segment}\n"
                        "#EXT-X-ENDLIST\n")
    with av.open(str(playlist)) as plain:  # what FFmpeg does unasked: it reads the file outside
        assert plain.format.name == "hls"
    (media / "cam.mp4").write_bytes(clip.read_bytes())
    config = ServiceConfig(media_roots=[media], results_dir=tmp_path / "results")
    with TestClient(create_app(config), base_url=LOCAL,
                    raise_server_exceptions=False) as client:
        refused = client.post("/api/streams", json={"url": str(playlist)})
        assert refused.status_code == 400 and "media roots allow" in refused.text
        assert client.post("/api/streams", json={"url": str(media / "cam.mp4")}
                           ).status_code == 201


@pytest.mark.parametrize(("url", "networks", "idn", "status", "text"), [
    ("rtsp://127.0.0.1:9/cam", ["127.0.0.0/8"], False, 201, ""),
    ("rtsp://10.1.2.3/cam", ["127.0.0.0/8"], False, 400, "outside allowed_networks"),
    ("rtsp://169.254.169.254:80/latest", ["10.0.0.0/8"], False, 400, "outside"),
    ("rtsp://10.1.2.3/cam", None, False, 201, ""),  # by default any address
    ("rtsp://cam\u202eevil.example/s", None, False, 400, "not plain ASCII"),
    ("rtsp://caméra.local/s", None, False, 400, "not plain ASCII"),
    ("rtsp://caméra.local/s", None, True, 201, ""),  # allowed on purpose
    ("rtsp://no-such-host.invalid/s", ["10.0.0.0/8"], False, 400, "does not resolve"),
])
def test_camera_addresses_are_checked_against_the_allowed_networks(tmp_path: Path, url,
                                                                    networks, idn, status,
                                                                    text):
    """Item 8: every RTSP destination was accepted (10.x, 169.254.169.254, 127.0.0.1:22) and
    hosts with U+202E were shown as given."""
    config = ServiceConfig(results_dir=tmp_path / "results", allowed_networks=networks,
                           allow_idn_hosts=idn)
    with TestClient(create_app(config), base_url=LOCAL,
                    raise_server_exceptions=False) as client:
        answer = client.post("/api/streams", json={"url": url})
        assert answer.status_code == status, answer.text
        assert text in answer.text
        assert "\u202e" not in answer.text
