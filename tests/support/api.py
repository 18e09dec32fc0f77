"""What the API tests share."""

from pathlib import Path

# The address TestClient's requests name in their Host header: one the service answers by
# default (``ServiceConfig.allowed_hosts``); TestClient's own "testserver" is refused.
LOCAL = "http://127.0.0.1"


def one_camera_config(clip: Path, tmp_path: Path, extra: str = "") -> Path:
    """A service.yaml with a media root holding ``clip`` as cam.mp4, streamed as "cam"
    (results under ``tmp_path``; ``extra``: more YAML keys)."""
    media = tmp_path / "media"
    media.mkdir()
    (media / "cam.mp4").write_bytes(clip.read_bytes())
    config = tmp_path / "service.yaml"
    config.write_text(f"media_roots: [{media}]\nresults_dir: {tmp_path / 'results'}\n{extra}"
                      f"streams:\n  - url: {media / 'cam.mp4'}\n    id: cam\n")
    return config
