"""Progress bars: a run's frames (done, fps, time left when the total is known), and the two
bars of training and pruning (scenes rendered, then optimiser steps with the loss)."""

from __future__ import annotations

from collections.abc import Callable
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
    """A run's bar, shown from its first report on: input refused before the run starts is
    one line, with no bar above it."""

    def __init__(self, console: Console, description: str = "frames") -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[fps]:>6.1f} fps"), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
            refresh_per_second=4,  # rich's 10 cost an idle camera's run 0.5 % of a core
        )
        self._description = description
        self._task: TaskID | None = None

    def update(self, done: int, total: int | None) -> None:
        if self._task is None:
            self._task = self._progress.add_task(self._description, total=total, fps=0.0)
            self._progress.start()
        task = self._progress.tasks[0]
        elapsed = task.elapsed or 0.0
        fps = done / elapsed if elapsed > 0 else 0.0
        self._progress.update(self._task, completed=done, total=total, fps=fps)

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()


def render_then_steps(progress: Progress, title: str, steps: int,
                      ) -> tuple[Callable[[int, int], None], Callable[[int, float], None]]:
    """Two bars: scenes rendered, then ``steps`` optimiser steps (started once rendering is
    done, so its ETA counts steps only); returns the callbacks that move them."""
    scenes = progress.add_task("rendering scenes", total=None, loss="")  # no loss to show
    task = progress.add_task(title, total=steps, loss="loss -", start=False)

    def rendered(done: int, total: int) -> None:
        progress.update(scenes, completed=done, total=total)
        if done == total:
            progress.start_task(task)

    def step(done: int, loss: float) -> None:
        progress.update(task, completed=done, loss=f"loss {loss:.3f}")

    return rendered, step


def train_progress(console: Console) -> Progress:
    """The bars of ``render_then_steps``, with the loss and the time left."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[loss]}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)
