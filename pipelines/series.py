"""A labelled Prometheus metric's children by their label values: each looked up once (the
lookup costs more than the observation it serves), and a stream's removed with it."""

from __future__ import annotations

from typing import Any


class SeriesByLabels:
    """A labelled metric's children by label values, each made once; a stream's are removed
    with ``forget`` when the stream is."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:  # two threads may both get here: labels() returns the same child
            child = self._children[values] = self._metric.labels(*values)
        return child

    def forget(self, first: str) -> None:
        """Remove every child whose first label value is ``first``."""
        for values in [v for v in list(self._children) if v[0] == first]:
            self._children.pop(values, None)
            try:
                self._metric.remove(*values)
            except KeyError:
                pass
