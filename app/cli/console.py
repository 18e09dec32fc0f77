"""What every command shares: the one console, one-line failures, and logging.

The console never reads markup or emoji codes in what it prints: file names, camera URLs and
error messages are the user's text (``front[door].mp4``, ``pip install 'vidpipe[openvino]'``)
and must print as written. Colour comes from ``Text`` styles instead (``styled``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from models.errors import VidpipeError

# Logs and CI output are read in files: wide enough for the bench table (13 columns).
console = Console(stderr=True, markup=False, emoji=False,
                  width=None if sys.stderr.isatty() else 160)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and (text, style) pairs, none of it read as markup."""
    return Text.assemble(*parts)


def fail(message: str) -> NoReturn:
    """Print ``error: MESSAGE`` as one line and exit 2 (bad input)."""
    console.print(styled(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Turn vidpipe's own errors (bad input, a model that does not fit, a camera that cannot
    be reached) into one line and exit 2; anything else is a bug and keeps its traceback."""
    try:
        yield
    except VidpipeError as e:
        fail(str(e))


def configure_logging(level: str) -> None:
    """Log lines on the console, as plain text (never markup), at ``level``."""
    from rich.logging import RichHandler

    logging.basicConfig(level=level.upper(), format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(console=console, show_path=False,
                                              markup=False)], force=True)
