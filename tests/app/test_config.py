from pathlib import Path

import pytest

from app.service.config import load_config
from pipelines.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "service.yaml"
    path.write_text(text)
    return path


def test_defaults_work_with_no_file_and_no_environment():
    cfg = load_config(None, environ={})
    assert (cfg.host, cfg.port, cfg.model, cfg.streams) == ("127.0.0.1", 8080, "ssdlite-person", [])


def test_a_file_with_streams_and_environment_overrides(tmp_path):
    path = write(tmp_path, "port: 9000\nstreams:\n  - url: rtsp://cam/1\n    id: door\n")
    cfg = load_config(path, environ={"VIDPIPE_PORT": "9100", "VIDPIPE_MEDIA_ROOTS": '["/srv"]',
                                     "VIDPIPE_API_TOKEN": "s3cret"})
    assert cfg.port == 9100 and cfg.media_roots == [Path("/srv")]
    assert cfg.streams[0].id == "door" and cfg.api_token == "s3cret"
    assert "s3cret" not in repr(cfg)


def test_the_token_comes_from_a_secret_file_too(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("fr0m-a-file\n")
    cfg = load_config(None, environ={"VIDPIPE_API_TOKEN_FILE": str(secret)})
    assert cfg.api_token == "fr0m-a-file"
    with pytest.raises(ConfigError, match="both set: set one"):
        load_config(None, environ={"VIDPIPE_API_TOKEN_FILE": str(secret),
                                   "VIDPIPE_API_TOKEN": "other"})
    with pytest.raises(ConfigError, match="cannot read .*missing"):
        load_config(None, environ={"VIDPIPE_API_TOKEN_FILE": str(tmp_path / "missing")})
    secret.write_text(" \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(None, environ={"VIDPIPE_API_TOKEN_FILE": str(secret)})


@pytest.mark.parametrize("text, message", [
    ("prot: 80\n", "prot: Extra inputs are not permitted"),
    ("port: 0\n", "port: Input should be greater than or equal to 1"),
    ("streams:\n  - url: rtsp://x\n    policy: newest\n",
     "streams.0.policy: Input should be 'block' or 'drop_oldest'"),
    ("streams:\n  - url: rtsp://x\n    id: 'bad id!'\n", "streams.0.id: String should match"),
    ("api_token: abc\n", "read only from the environment"),
    ("- just\n- a list\n", "must be a mapping"),
    ("port: [unclosed\n", "not valid YAML"),
])
def test_errors_name_the_key_and_what_it_allows(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(write(tmp_path, text), environ={})


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_the_service_takes_every_pipeline_setting_and_builds_the_same_options(tmp_path):
    from pipelines.options import PipelineOptions

    path = write(tmp_path, "device: cuda:1\nruntime: torch\nprecision: fp32\n")
    cfg = load_config(path, environ={"VIDPIPE_DECODE": "pyav", "VIDPIPE_BATCH_SIZE": "8"})
    options = PipelineOptions.from_settings(cfg, name="door", capacity=2)
    assert (options.device, options.runtime, options.precision, options.decode) == (
        "cuda:1", "torch", "fp32", "pyav")
    assert (options.batch_size, options.batch_timeout_ms, options.name) == (8, 5.0, "door")
    assert load_config(write(tmp_path, "runtime: openvino\n"), environ={}).runtime == "openvino"
    with pytest.raises(ConfigError, match="service.yaml: runtime: Input should be 'auto', "
                                          "'onnxruntime', 'openvino', 'openvino-bf16', "
                                          "'tensorrt' or 'torch'"):
        load_config(write(tmp_path, "runtime: tflite\n"), environ={})
