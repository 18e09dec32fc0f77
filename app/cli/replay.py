"""``vidpipe replay RUN_DIR``: a run's tracking and counting again from its detections.jsonl,
with other lines, zones or tracker, in seconds: no decoding, no model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.console import console, failing_cleanly
from app.cli.run import LineOpt, TrackOpt, ZoneOpt


def replay(
    run_dir: Annotated[Path, typer.Argument(
        metavar="RUN_DIR", help="A run's --out folder (detections.jsonl, summary.json).")],
    track: TrackOpt = None, line: LineOpt = None, zone: ZoneOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="The run's model (its card's threshold and labels): by "
        "default the one summary.json names.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the comparison as JSON instead of tables.")] = False,
) -> None:
    """Replay a run's tracker, lines and zones on the boxes its model gave, and print how the
    counts and events change against the run.

    Without --line, --zone or --track the run's own settings are replayed; each one given
    replaces the run's (all its lines with --line, all its zones with --zone). The boxes
    are read from RUN_DIR/detections.jsonl: frames the model did not see in the run
    (--detect-every) are predicted again between the frames it saw.

    \b
      vidpipe run clip.mp4 --out run --line door=320,0,320,384
      vidpipe replay run --line door=300,0,300,384     # the line moved 20 px
      vidpipe replay run --track ocsort                # another tracker, same line
    """
    with failing_cleanly():
        from app.run.replay import replay_run

        report = replay_run(run_dir, track=track, lines=line, zones=zone, model=model)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print(report)


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    for sid, stream in report["streams"].items():
        table = Table(title=f"{sid}: recorded -> replayed", title_justify="left")
        for column in ("", "recorded", "replayed", "change"):
            table.add_column(column, justify="left" if not column else "right")
        for kind, keys in (("lines", ("in", "out")), ("zones", ("entered", "exited"))):
            for name, counts in stream[kind].items():
                for key in keys:
                    was, now = counts["recorded"].get(key), counts["replayed"][key]
                    table.add_row(f"{kind[:-1]} {name} {key}", _shown(was), str(now),
                                  _change(was, now))
        for kind, counts in stream["events"].items():
            was, now = counts["recorded"], counts["replayed"]
            table.add_row(f"events {kind}", _shown(was), str(now), _change(was, now))
        console.print(table)
    console.print(f"replayed {report['frames']} frames of {len(report['streams'])} "
                  f"stream(s) in {report['seconds']:.2f} s ({report['fps']:.0f} frames/s)",
                  highlight=False)
    if report.get("note"):
        console.print(report["note"], highlight=False)


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)


def _change(was: int | None, now: int) -> str:
    if was is None:
        return "new"
    return f"{now - was:+d}" if now != was else "="

