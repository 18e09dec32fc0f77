"""An interrupted `vidpipe run` says so (issue 22, item 10): exit 130, summary.json names the
file and how far it got, the outputs hold exactly the frames processed, and no hidden partial
file is left; a partial file a killed run left is removed by the next run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.synthetic.rectangles import make_test_clip
from tests.support.cli import vidpipe


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_file_stopped_before_its_end_exits_130_and_says_where(tmp_path: Path, sig):
    clip = make_test_clip(tmp_path / "long.mp4", frames=1500)  # about 10 s of work
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run", str(clip),
                             "--out", str(out), "--infer-threads", "1", "--batch-size", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "threads:" not in proc.stdout.readline():
        pass
    time.sleep(2.0)
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted" in rest and "of 1500 frames" in rest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"]["by"] == sig.name
    frames = summary["interrupted"]["unfinished"]["long"]
    assert 0 < frames["frames"] < frames["declared"] == 1500
    lines = (out / "detections.jsonl").read_text().splitlines()
    assert len(lines) == summary["streams"]["long"]["outcomes"]["processed"]
    assert not list(out.glob(".*.partial"))


def test_a_partial_file_left_by_a_killed_run_is_removed(tmp_path: Path, small_clip: Path):
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".detections.jsonl.partial"
    stale.write_text('{"stream": "old", "frame": 0}\n')
    code, output = vidpipe("run", small_clip, "--out", out, "--model", "shapes-yolo")
    assert code == 0, output
    assert not stale.exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is False
