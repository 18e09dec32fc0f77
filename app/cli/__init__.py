"""``vidpipe``: the command line, one module per face of it.

    vidpipe run clip.mp4                 detect with the shipped person model, print the figures
    vidpipe run a.mp4 b.mp4 --annotate   several streams at once, batched together
    vidpipe demo                         make the demo clip and run on it
    vidpipe replay run/ --line a=...     a run's counting again, other lines, in seconds
    vidpipe serve --config service.yaml  the service: API, dashboard, /metrics
    vidpipe bench --quick                the pipeline against the hand-written loop
    vidpipe profile clip.mp4             the bottleneck and what to do about it
    vidpipe model --help                 train, score, prune, quantize, check models

``run.py`` (run, demo), ``serve.py``, ``bench.py`` (bench, profile) and ``model/`` hold the
commands; ``options.py`` the options they share, ``console.py`` the console and one-line
failures. A command imports what it runs when it runs, so ``vidpipe --help`` and ``vidpipe
version`` load no engine, no model and no torch.
"""

from __future__ import annotations

import typer

from app import __version__
from app.cli.bench import bench, profile
from app.cli.model import model
from app.cli.replay import replay
from app.cli.run import demo, run
from app.cli.serve import serve

cli = typer.Typer(
    name="vidpipe", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="Streaming video analytics: decode -> preprocess -> detect -> postprocess -> sinks, "
         "with every stage measured.",
)


def version() -> None:
    """Print vidpipe's version."""
    typer.echo(__version__)


for command in (run, demo, replay, bench, profile, serve, version):
    cli.command()(command)
cli.add_typer(model, name="model")


def main() -> None:
    cli()
