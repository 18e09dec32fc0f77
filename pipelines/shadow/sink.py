"""ShadowSink: the candidate compared on the sink stage, for a run over files (``vidpipe run
--shadow``): every wanted frame, in the sink's call (the run takes the candidate's time too,
which the comparison reports apart). It wants full pictures: the candidate prepares each
by its own card."""

from __future__ import annotations

from pipelines.frame import Result
from pipelines.shadow.compare import ShadowComparison


class ShadowSink:
    wants_images = True

    def __init__(self, comparison: ShadowComparison) -> None:
        self.comparison = comparison

    def write(self, result: Result) -> None:
        if self.comparison.wanted(result):
            self.comparison.compare([result])

    def close(self, commit: bool = True) -> None:
        self.comparison.close()
