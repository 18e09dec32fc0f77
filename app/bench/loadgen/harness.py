"""One LoadGen run: a scenario's settings (MLPerf's defaults, then ``user.conf``; the short
mode cuts the length for CI), the system under test and the sample library handed to
LoadGen, its logs written to a folder, and the summary's figures read back.

MLPerf's defaults are LoadGen's built-in mlperf.conf: ten minutes a run, at least 662
queries in MultiStream (for its 99th percentile). LoadGen reads that file only on a
process's first ``FromConfig``, so they are set here (``FULL_MS``, ``MIN_QUERIES``) rather
than left to it. ``seconds`` shortens a run (figures made so say their length); the short
mode (``SHORT_MS``, ``SHORT_QUERIES``) is for CI: LoadGen may then call the run INVALID for
its length or its early-stopping count, in its summary's own words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.bench.loadgen.library import SampleLibrary

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
CONF = Path(__file__).with_name("user.conf")
FULL_MS = 600_000
MIN_QUERIES = {"SingleStream": 100, "MultiStream": 662, "Server": 100, "Offline": 1}
SHORT_MS = 3_000
SHORT_QUERIES = 32
SUMMARY = "mlperf_log_summary.txt"
DETAIL = "mlperf_log_detail.txt"


class System(Protocol):
    name: str
    describe: str

    def issue(self, samples: list[Any]) -> None: ...

    def flush(self) -> None: ...


def _lg() -> Any:
    try:
        import mlperf_loadgen
    except ImportError:
        from pipelines.errors import ConfigError

        raise ConfigError("--loadgen needs MLPerf's LoadGen: pip install "
                          "mlcommons-loadgen") from None
    return mlperf_loadgen


@dataclass
class Summary:
    """What LoadGen's summary says of a run."""

    scenario: str
    valid: bool
    fields: dict[str, str] = field(default_factory=dict)  # its "key : value" lines

    def number(self, key: str) -> float | None:
        value = self.fields.get(key)
        try:
            return None if value is None else float(value)
        except ValueError:
            return None

    def headline(self) -> dict[str, Any]:
        """The scenario's figure (latencies in ms), as MLPerf reports it."""
        ns = 1e-6
        if self.scenario == "SingleStream":
            p90 = self.number("90.0th percentile latency (ns)")
            return {"p90_ms": None if p90 is None else p90 * ns}
        if self.scenario == "MultiStream":
            p99 = self.number("99.0th percentile latency (ns)")
            return {"p99_ms": None if p99 is None else p99 * ns}
        if self.scenario == "Server":
            p99 = self.number("99.00 percentile latency (ns)")
            return {"completed_qps": self.number("Completed samples per second"),
                    "scheduled_qps": self.number("Scheduled samples per second"),
                    "p99_ms": None if p99 is None else p99 * ns}
        return {"samples_per_s": self.number("Samples per second")}


def settings(scenario: str, model: str, *, seconds: float | None = None, short: bool = False,
             accuracy: bool = False, given: dict[str, float] | None = None) -> Any:
    """LoadGen's settings for ``scenario``: MLPerf's length (or ``seconds``, or the short
    mode's), ``user.conf`` (keys for ``model`` or for any), then ``given`` (TestSettings
    attributes: a measured Server rate, an Offline or MultiStream expectation)."""
    lg = _lg()
    if scenario not in SCENARIOS:
        from pipelines.errors import ConfigError

        raise ConfigError(f"--loadgen {scenario!r}: expected some of {', '.join(SCENARIOS)}")
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, scenario)
    if s.FromConfig(str(CONF), model, scenario, 1) != 0:
        raise RuntimeError(f"LoadGen could not read {CONF}")
    s.mode = lg.TestMode.AccuracyOnly if accuracy else lg.TestMode.PerformanceOnly
    s.min_duration_ms = SHORT_MS if short else int(1000 * seconds) if seconds else FULL_MS
    s.min_query_count = SHORT_QUERIES if short else MIN_QUERIES[scenario]
    for key, value in (given or {}).items():
        setattr(s, key, value)
    return s


def run(system: System, library: SampleLibrary, test: Any, out: Path) -> Summary:
    """``system`` under LoadGen with ``test``'s settings; its logs in ``out``."""
    lg = _lg()
    out.mkdir(parents=True, exist_ok=True)
    for stale in (SUMMARY, DETAIL, "mlperf_log_accuracy.json"):
        (out / stale).unlink(missing_ok=True)
    log = lg.LogSettings()
    log.log_output.outdir = str(out)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = lg.ConstructSUT(system.issue, system.flush)
    qsl = lg.ConstructQSL(len(library), len(library), library.load, library.unload)
    try:
        lg.StartTestWithLogSettings(sut, qsl, test, log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return read_summary(out / SUMMARY)


def read_summary(path: Path) -> Summary:
    """LoadGen's summary file: its scenario, whether the run is VALID, its fields."""
    fields = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$", line)
        if match:
            fields[match.group(1)] = match.group(2)
    return Summary(fields.get("Scenario", "").replace(" ", ""),
                   fields.get("Result is") == "VALID", fields)
