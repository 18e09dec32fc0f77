"""``vidpipe bench --capacity``: how many cameras this machine holds, for each way of running
them, measured on cameras whose truth is known.

The cameras play quiet scenes (``pipelines.synthetic.quiet``, made once in build/capacity): a
still picture with sensor noise and a slow change of light, people walking in, standing a
while and leaving about a quarter of the time, a clock overlay and a swaying patch (masked
where motion gating is on); each scene as a 1280x720@30 main stream and a 640x360@15 sub-stream.
For each mode (``capacity_run.MODES``: every frame of the main stream; detect_fps 5; plus
motion gating; plus detecting on the sub-stream; the same without clips, whose ring of the
main stream's packets is most of a camera's memory) the cameras are ramped, each count in a
fresh process, and per count the bench reports the cores used, the frames decoded, detected
and skipped per second, the share dropped, the RSS, the recall (visitors wholly in the
picture for 1 s or more found by a confirmed track) and the time from a visitor's entry to
its first tracked box. A count runs for ``--seconds``, and at least 1.5 loops of the 30 s
scenes, so that every camera's visitors are wholly in the window at least once. A mode's
**capacity** is the most cameras with recall >= 0.98, p99 time to first box <= 1 s and drops
<= 1 %; its ramp stops at the first count past that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.bench.capacity_run import DEFAULT_MODES, MODES
from app.bench.machine import machine
from app.bench.service import run_in_tree
from pipelines.errors import ConfigError
from pipelines.synthetic.quiet import make_quiet_clip

FOLDER = Path("build/capacity")
SCENES = 4
SCENE_S = 30.0
ACTIVE = 0.3  # of the time someone is in the picture (1 to 3 visits a scene)
# a count is measured for at least this many loops of the scenes, so that every camera's
# visitors are wholly inside the window at least once, whichever moment it started at
LOOPS = 1.5
GOALS = {"recall": 0.98, "first_p99_s": 1.0, "dropped_share": 0.01}


def scenes(console: Console, capped: bool = True) -> list[dict[str, Path]]:
    """The scenes, made once: each a main stream and a sub-stream of the same visits, their
    bitrates capped as a camera's are, or (not ``capped``) as x264's quality target gives."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    made = []
    for seed in range(1, SCENES + 1):
        pair = {}
        for kind, size, fps in (("main", (1280, 720), 30), ("sub", (640, 360), 15)):
            path = FOLDER / f"scene{seed}-{kind}-{'cap' if capped else 'crf'}.mp4"
            if not path.exists():
                console.print(f"making {path} ...")
                make_quiet_clip(path, seconds=SCENE_S, fps=fps, size=size, seed=seed,
                                active=ACTIVE, capped=capped)
            pair[kind] = path
        made.append(pair)
    return made


def holds(row: dict[str, Any]) -> bool:
    """Whether a count meets the goals."""
    return (row["recall"] is not None and row["recall"] >= GOALS["recall"]
            and row["first_p99_s"] is not None and row["first_p99_s"] <= GOALS["first_p99_s"]
            and row["dropped_share"] <= GOALS["dropped_share"])


def what_stops(row: dict[str, Any]) -> str:
    """The goals a count misses, in words ("" where it holds): for drops, their causes, beside
    the most frames the detector took in a second and what its model gives alone, so the
    table says whether the model or the engine stopped it."""
    missed = []
    if row["recall"] is None or row["recall"] < GOALS["recall"]:
        missed.append("recall")
    if row["first_p99_s"] is None or row["first_p99_s"] > GOALS["first_p99_s"]:
        missed.append("first box p99")
    if row["dropped_share"] > GOALS["dropped_share"]:
        alone = row.get("model_alone_fps")
        causes = ", ".join(row.get("dropped_by_cause", {}))
        missed.append(f"drops ({causes + '; ' if causes else ''}detector at most "
                      f"{row.get('detected_peak_fps', 0):.0f}/s"
                      + ("" if alone is None else f", the model alone {alone:.0f}/s") + ")")
    return ", ".join(missed)


def ramp(mode: str, counts: list[int], seconds: float, made: list[dict[str, Path]],
         console: Console) -> list[dict[str, Any]]:
    rows = []
    script = Path(__file__).with_name("capacity_run.py")
    paths = [str(p.resolve()) for scene in made for p in (scene["main"], scene["sub"])]
    for count in counts:
        with console.status(f"{mode}: {count} cameras, {seconds:g} s"):
            row = run_in_tree(script, [mode, str(count), str(seconds), *paths], None,
                              seconds + 60 + 2 * count)
        row["holds"] = holds(row)
        rows.append(row)
        console.print(row)
        if not row["holds"]:
            break
    return rows


def chosen_modes(text: str | None) -> list[str]:
    """``--modes`` (None: the five of the table); ConfigError naming one that is not a mode."""
    chosen = list(DEFAULT_MODES) if text is None else [m.strip() for m in text.split(",")]
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise ConfigError(f"--modes: {', '.join(unknown)} is not a mode (the modes: "
                          f"{', '.join(MODES)})")
    return chosen


def bench_capacity(console: Console, counts: list[int], seconds: float, modes_text: str | None,
                   out: Path, capped: bool = True) -> dict[str, Any]:
    modes = chosen_modes(modes_text)
    seconds = max(seconds, LOOPS * SCENE_S)
    made = scenes(console, capped)
    rows = [row for mode in modes for row in ramp(mode, counts, seconds, made, console)]
    capacity = {mode: max([r["cameras"] for r in rows if r["mode"] == mode and r["holds"]],
                          default=0) for mode in modes}
    report = {"machine": machine(), "seconds": seconds, "capped": capped, "goals": GOALS,
              "rows": rows, "capacity": capacity}
    _print(console, report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {out / 'capacity.json'}")
    return report


def _print(console: Console, report: dict[str, Any]) -> None:
    table = Table(title=f"Cameras per machine ({report['seconds']:g} s a count)")
    for column in ("mode", "cameras", "cores", "decoded/s", "detected/s", "skipped/s",
                   "dropped", "RSS MB", "recall", "first box p50/p99 s", "holds", "stops it"):
        table.add_column(column, justify="right")
    for r in report["rows"]:
        first = "-" if r["first_p50_s"] is None else f"{r['first_p50_s']}/{r['first_p99_s']}"
        recall = "-" if r["recall"] is None else f"{r['recall']:.2f} ({r['found']}/" \
            f"{r['visitors']})"
        table.add_row(r["mode"], str(r["cameras"]), f"{r['cores']:.2f}",
                      f"{r['decoded_fps']:.0f}", f"{r['detected_fps']:.0f}",
                      f"{r['skipped_fps']:.0f}", f"{r['dropped_share']:.1%}",
                      f"{r['rss_mb']:.0f}", recall, first, "yes" if r["holds"] else "no",
                      what_stops(r))
    console.print(table)
    for mode, cameras in report["capacity"].items():
        console.print(f"capacity, {mode}: {cameras} cameras")
