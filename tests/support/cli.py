"""Run the ``vidpipe`` CLI in-process, as the tests of several commands do."""

from __future__ import annotations

from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()


def vidpipe(*args: object) -> tuple[int, str]:
    """Exit code and output of ``vidpipe ARGS``; exceptions propagate."""
    result = runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def vidpipe_model(*args: object) -> tuple[int, str]:
    """Exit code and output of ``vidpipe model ARGS``."""
    return vidpipe("model", *args)
