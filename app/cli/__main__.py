"""``python -m app.cli``: the ``vidpipe`` command."""

from app.cli import main

main()
