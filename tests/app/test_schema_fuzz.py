"""Schemathesis against a live `vidpipe serve`: no 5xx, and every answer (status, content
type, headers, body, each server-sent event) as the OpenAPI document declares it.

A bounded run (``EXAMPLES`` per operation, a fixed seed) of every check and every phase
(coverage, fuzzing, stateful), with a token set; ``schemathesis/schemathesis.toml`` holds what
a schema cannot say. Longer runs: ``VIDPIPE_FUZZ_EXAMPLES=500``.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app.test_serve import free_port, get_json
from tests.support.api import one_camera_config

pytestmark = pytest.mark.slow  # a live service fuzzed with about a thousand requests

CONFIG = Path(__file__).with_name("schemathesis") / "schemathesis.toml"
EXAMPLES = int(os.environ.get("VIDPIPE_FUZZ_EXAMPLES", "20"))
TOKEN = "fuzz-t0ken"


def test_the_api_answers_every_generated_request_as_its_schema_says(small_clip, tmp_path):
    port = free_port()
    config = one_camera_config(small_clip, tmp_path, "max_streams: 4\n")
    env = {**os.environ, "VIDPIPE_API_TOKEN": TOKEN}
    log_path = tmp_path / "service.log"
    with log_path.open("w") as log:  # a file: a pipe nobody reads fills and blocks the server
        server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config",
                                   str(config), "--port", str(port)], stdout=log,
                                  stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"{base}/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline, "vidpipe serve did not come up"
                time.sleep(0.2)
        fuzz = subprocess.run(
            [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(CONFIG),
             "run", f"{base}/openapi.json", "--checks", "all", "--max-examples", str(EXAMPLES),
             "--seed", "1", "--report", "junit", "--report-dir", str(tmp_path / "report")],
            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)  # its cache too
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = log_path.read_text()
    print(fuzz.stdout[-3000:])
    assert fuzz.returncode == 0, fuzz.stdout[-8000:] + fuzz.stderr[-2000:]
    assert "passed" in fuzz.stdout and " 0 passed" not in fuzz.stdout
    assert "Traceback" not in log, log[-4000:]
    assert '" 500' not in log, "a request got 500"
