"""A labelled Prometheus metric's children by their label values: each looked up once (the
lookup costs more than the observation it serves), and a stream's removed with it; and a
histogram's observations of a call's items made at once (``observe_all``)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
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


def observe_all(histogram: Any, values: Sequence[float]) -> None:
    """``histogram.observe(v)`` for every value, with each bucket and the sum incremented
    once for them all (each increment takes the child's lock). Reads the child's bounds and
    values, prometheus_client's own (the version is pinned; tests/pipelines/test_metrics.py
    compares the exposition with ``observe``'s)."""
    if len(values) < 2:  # one value: ``observe`` is the cheaper
        for value in values:
            histogram.observe(value)
        return
    histogram._raise_if_not_observable()
    bounds = histogram._upper_bounds  # ends with +Inf: every value finds its bucket
    for index, count in Counter(bisect_left(bounds, v) for v in values).items():
        histogram._buckets[index].inc(count)
    histogram._sum.inc(sum(values))
