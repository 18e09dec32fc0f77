"""``vidpipe bench --startup``: what a user waits for, whole processes timed from the outside.

Per repetition, interleaved (and per code, with ``--against REV``: that commit's tree run the
same way): ``vidpipe --help`` (median of 5); ``vidpipe run CLIP --model M`` twice, first with
an empty plan cache and then with the one the first left, each timed from the process's start
to its first processed frame (read from its Prometheus port: the counter moves when the result
is written) and to its end; and, given an interpreter with Ultralytics, its
``predict(stream=True)`` on the same ONNX and clip as a user's script runs it (to its first
result and to its end), whose detections are compared frame by frame with vidpipe's. Then the
service's resident memory, idle and with one stream of the clip played as a camera (read
``settle_s`` after the stream was added: ``--seconds``).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from app.bench.machine import machine
from app.bench.runtimes import exported_by_ultralytics
from app.bench.service import worktree
from models.zoo import resolve_model
from pipelines.frame import Detections
from pipelines.postprocess.agreement import Agreement

REPO = Path(__file__).resolve().parents[2]
PEER = Path(__file__).with_name("ultralytics_peer.py")
RUN_TIMEOUT_S = 900.0


def bench_startup(console: Console, model: str | None, source: Path | None, reps: int,
                  ultralytics_python: Path | None, out: Path, against: str | None = None,
                  settle_s: float = 10.0) -> dict[str, Any]:
    from app.run.demo import ensure_demo_clip

    clip = (source or ensure_demo_clip(Path("build/demo/clip.mp4"), console)).resolve()
    model_path, _ = resolve_model(model)
    name = model or "ssdlite-person"
    if Path(name).exists():  # the runs' working folder is their code's tree
        name = str(Path(name).resolve())
    peer = ultralytics_python if ultralytics_python is not None and \
        exported_by_ultralytics(model_path) else None
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vidpipe-startup-")))
        codes: list[tuple[str, Path | None]] = [("this", None)]
        if against is not None:
            codes.append(("against", stack.enter_context(worktree(against))[1]))
        for rep in range(reps):
            for label, tree in (codes if rep % 2 == 0 else codes[::-1]):
                with console.status(f"rep {rep + 1}/{reps}: {label}"):
                    rows.append({"code": label, "rep": rep}
                                | measure_code(tree, name, clip, work / f"{label}-{rep}"))
            if peer is not None:
                with console.status(f"rep {rep + 1}/{reps}: Ultralytics"):
                    rows.append({"code": "ultralytics", "rep": rep}
                                | measure_peer(peer, model_path, clip))
        service = {label: service_rss(tree, clip, settle_s) for label, tree in codes}
        summary = summarise(rows)  # reads the runs' detections: before ``work`` goes
    report = {"machine": machine(), "clip": str(clip), "model": str(model_path), "reps": reps,
              "against": against, "runs": rows, "service_rss_mb": service, "summary": summary}
    console.print(startup_table(report))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {out / 'bench.json'}")
    return report


def measure_code(tree: Path | None, model: str, clip: Path, work: Path) -> dict[str, Any]:
    """One code's help, first run (empty cache) and repeat run (its cache), in ``work``."""
    helps = [_timed([*_vidpipe(), "--help"], tree)[1] for _ in range(5)]
    first = time_run(tree, model, clip, work / "first", work / "cache")
    repeat = time_run(tree, model, clip, work / "repeat", work / "cache")
    return {"help_s": statistics.median(helps), "first": first, "repeat": repeat}


def time_run(tree: Path | None, model: str, clip: Path, out: Path,
             cache: Path) -> dict[str, Any]:
    """``vidpipe run`` as a process: seconds to its first processed frame and to its end."""
    port = _free_port()
    argv = [*_vidpipe(), "run", str(clip), "--model", model, "--out", str(out),
            "--metrics-port", str(port), "--log-level", "warning"]
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tree or REPO, env=_env(tree, cache),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    while proc.poll() is None and first is None:
        if _processed(port) > 0:
            first = time.monotonic() - start
        else:
            time.sleep(0.01)
    _, errors = proc.communicate(timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"vidpipe run failed ({proc.returncode}): {errors[-500:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"first_result_s": first, "wall_s": wall, "pipeline_s": summary["wall_s"],
            "frames": sum(s["outcomes"].get("processed", 0)
                          for s in summary["streams"].values()),
            "runtime": summary.get("runtime", {}).get("runtime"),
            "cached": summary.get("plan", {}).get("cached", False),
            "detections": str(out / "detections.jsonl")}


def measure_peer(python: Path, model_path: Path, clip: Path) -> dict[str, Any]:
    """Ultralytics' predict over the clip as a user's script: to its first result, to its end;
    and its detections against the vidpipe run of this rep (the last one measured)."""
    start = time.monotonic()
    proc = subprocess.Popen([str(python), "-P", str(PEER), "whole", str(model_path.resolve()),
                             str(clip), "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    first = None
    lines = []
    for line in proc.stdout:
        if line.strip() == "first" and first is None:
            first = time.monotonic() - start
        else:
            lines.append(line)
    errors = proc.stderr.read() if proc.stderr is not None else ""
    proc.wait(timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"Ultralytics' run failed: {errors[-500:]}")
    found = json.loads(lines[-1])
    return {"first_result_s": first, "wall_s": wall, "frames": found["frames"],
            "detections": found["detections"]}


def agreement(vidpipe_lines: Path, peer: list[list[list[float]]]) -> dict[str, Any]:
    """vidpipe's detections against Ultralytics', frame by frame (``Agreement``)."""
    ours = {}
    for text in vidpipe_lines.read_text().splitlines():
        line = json.loads(text)
        ours[line["frame"]] = _detections([[*d["box"], d["score"], d["class_id"]]
                                           for d in line["detections"]])
    result = Agreement()
    for index, boxes in enumerate(peer):
        result.add(_detections(boxes), ours.get(index))
    return result.as_dict()


def _detections(rows: list[list[float]]) -> Detections:
    """Rows of (x1, y1, x2, y2, score, class) as Detections."""
    table = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
    return Detections(table[:, :4], table[:, 4], table[:, 5].astype(np.int32))


def service_rss(tree: Path | None, clip: Path, settle_s: float) -> dict[str, float]:
    """``vidpipe serve``'s resident memory idle (its API up) and with one stream of ``clip``
    (played as a camera, with the default model) after ``settle_s``."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="vidpipe-bench-serve-") as tmp:
        config = Path(tmp) / "service.yaml"
        config.write_text(f"port: {port}\nmedia_roots: [{json.dumps(str(clip.parent))}]\n"
                          f"results_dir: {json.dumps(str(Path(tmp) / 'results'))}\n")
        proc = subprocess.Popen([*_vidpipe(), "serve", "--config", str(config),
                                 "--log-level", "warning"], cwd=tree or REPO,
                                env=_env(tree, Path(tmp) / "cache"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_for(lambda: _get(f"{base}/healthz") is not None, 60)
            time.sleep(2.0)
            idle = _rss_mb(proc.pid)
            body = json.dumps({"url": str(clip), "id": "cam"}).encode()
            request = urllib.request.Request(f"{base}/api/streams", body, method="POST",
                                             headers={"content-type": "application/json"})
            urllib.request.urlopen(request, timeout=60).close()
            time.sleep(settle_s)
            one = _rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"idle": round(idle, 1), "one_stream": round(one, 1)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per code; Ultralytics' whole process over vidpipe's repeat run, and the
    detections' agreement."""
    summary: dict[str, Any] = {}
    for code in dict.fromkeys(r["code"] for r in rows):
        mine = [r for r in rows if r["code"] == code]
        if code == "ultralytics":
            summary[code] = {k: statistics.median(r[k] for r in mine)
                             for k in ("first_result_s", "wall_s")}
            continue
        summary[code] = {"help_s": statistics.median(r["help_s"] for r in mine)} | {
            f"{run}_{k}": statistics.median(r[run][k] for r in mine)
            for run in ("first", "repeat") for k in ("first_result_s", "wall_s")}
    peer = [r for r in rows if r["code"] == "ultralytics"]
    if peer and "this" in summary:
        ours = [r for r in rows if r["code"] == "this"]
        summary["ultralytics_over_vidpipe_repeat"] = round(
            summary["ultralytics"]["wall_s"] / summary["this"]["repeat_wall_s"], 3)
        summary["agreement"] = agreement(Path(ours[-1]["repeat"]["detections"]),
                                         peer[-1]["detections"])
    return summary


def startup_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"Whole processes on {Path(report['clip']).name} "
                        f"({Path(report['model']).name}), medians of {report['reps']}")
    for column in ("code", "--help s", "first run: first result s", "first run: end s",
                   "repeat: first result s", "repeat: end s"):
        table.add_column(column, justify="left" if column == "code" else "right")
    summary = report["summary"]
    for code in ("this", "against", "ultralytics"):
        figures = summary.get(code)
        if figures is None:
            continue
        if code == "ultralytics":
            table.add_row(code, "-", _s(figures["first_result_s"]), _s(figures["wall_s"]),
                          "-", "-")
        else:
            table.add_row(code, _s(figures["help_s"]), _s(figures["first_first_result_s"]),
                          _s(figures["first_wall_s"]), _s(figures["repeat_first_result_s"]),
                          _s(figures["repeat_wall_s"]))
    if "ultralytics_over_vidpipe_repeat" in summary:
        agreeing = summary["agreement"]["frame_agreement"]
        table.caption = (f"Ultralytics' whole process / vidpipe's repeat run: "
                         f"{summary['ultralytics_over_vidpipe_repeat']:.2f}x; frames whose "
                         f"detections agree: {agreeing}")
    return table


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _vidpipe() -> list[str]:
    return [sys.executable, "-P", "-m", "app.cli"]


def _env(tree: Path | None, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree or REPO), "VIDPIPE_CACHE_DIR": str(cache)}


def _timed(argv: list[str], tree: Path | None) -> tuple[int, float]:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=tree or REPO, env=_env(tree, Path(tempfile.gettempdir())),
                          capture_output=True, timeout=120, check=False)
    return done.returncode, time.monotonic() - start


def _processed(port: int) -> float:
    text = _get(f"http://127.0.0.1:{port}/metrics")
    if text is None:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vidpipe_frames_total{") and 'outcome="processed"' in line)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def _wait_for(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the service did not come up")
        time.sleep(0.1)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
