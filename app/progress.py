"""A progress bar for a run over files: frames done, fps, and time left when the total is known."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunProgress:
    def __init__(self, console: Console, description: str = "frames") -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[fps]:>6.1f} fps"), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        )
        self._task: TaskID = self._progress.add_task(description, total=None, fps=0.0)

    def update(self, done: int, total: int | None) -> None:
        task = self._progress.tasks[0]
        elapsed = task.elapsed or 0.0
        fps = done / elapsed if elapsed > 0 else 0.0
        self._progress.update(self._task, completed=done, total=total, fps=fps)

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()
