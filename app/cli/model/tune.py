"""``vidpipe model tune-tracker``: the tracker's settings searched on a labelled clip for a
model, and written to its card."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.console import console, fail, failing_cleanly


def tune_tracker(
    model_name: Annotated[str, typer.Argument(
        metavar="MODEL", help="Zoo name, folder with card.yaml, or .onnx with a card beside it.")],
    video: Annotated[Path, typer.Option("--video", help="A clip with MOT truth.")],
    truth: Annotated[Path | None, typer.Option(
        "--truth", metavar="MOT_FILE", help="Its MOT truth (frame, id, x, y, w, h, ...; "
        "default: CLIP.mot.txt beside it). With CLIP.counts.json beside it (the counting "
        "set's), the count error is reported too.")] = None,
    detect_every: Annotated[int, typer.Option(
        "--detect-every", min=1, max=30, help="Fit the tracker to streams that run the model "
        "on one frame in N (its times are frames at 30 fps, but what fits N = 1 may still "
        "not fit N = 3).")] = 1,
    write: Annotated[bool, typer.Option(
        "--write/--dry-run", help="Write the settings found to the model's card (what a "
        "stream's tracker takes where its own settings say nothing), or only print them.")]
    = True,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the run's outputs and "
                                      "tune.json.")] = Path("out/tune-tracker"),
) -> None:
    """Run MODEL once over a labelled clip, then track its boxes again under each setting of
    the tracker (lost-track time, time to confirm, overlap to associate, duplicate boxes,
    how long a lost track's id waits for its object, thresholds from the model's own
    scores), keeping what raises HOTA; print HOTA, IDF1, ID switches (and the count error)
    before and after, and write the settings to the card.

    Tune on one clip and check on others (`vidpipe model evaluate --track`): settings that
    only fit the clip they were found on are worth nothing."""
    logging.basicConfig(level="WARNING", format="%(message)s", force=True)
    with failing_cleanly():
        from app.recipes.tune_tracker import tune, write_card
        from models.tracking_data import mot_truth_path
        from models.zoo import resolve_model

        model_path, spec = resolve_model(model_name)
        card = model_path.parent / "card.yaml"
        if write and not card.is_file():
            fail(f"{model_path} has no card.yaml beside it to write the settings to: make one "
                 "(docs/MODELS.md), or look first with --dry-run")
        report = tune(model_path, spec, video, truth or mot_truth_path(video), out,
                      detect_every=detect_every,
                      on_step=lambda text: console.print(f"  better: {text}", highlight=False))
        out.mkdir(parents=True, exist_ok=True)
        (out / "tune.json").write_text(json.dumps(report, indent=2))
    _print(report)
    if not report["changed"]:
        console.print("the model's settings are the best found: nothing to write")
    elif write:
        write_card(card, spec.tracker | report["changed"],
                   f"vidpipe model tune-tracker on {video.name}: HOTA "
                   f"{report['before']['HOTA']} -> {report['after']['HOTA']}")
        console.print(f"wrote the tracker settings to {card}")
    console.print(f"wrote {out / 'tune.json'}")


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"tracker fitted on {Path(report['video']).name} "
                        f"({report['evaluations']} settings tried)")
    table.add_column("")
    for column in report["before"]:
        table.add_column(column, justify="right")
    for when in ("before", "after"):
        table.add_row(when, *(str(v) for v in report[when].values()))
    console.print(table)
    changed = ", ".join(f"{k} = {v}" for k, v in report["changed"].items()) or "nothing"
    console.print(f"changed: {changed}", highlight=False)
