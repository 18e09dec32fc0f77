"""Which metric names a PromQL expression reads, and which names a ``/metrics`` page exports.

Small on purpose: enough of PromQL's lexical structure to find the series names in the
expressions vidpipe ships (Grafana panels, alert rules), checked by a table of cases in
tests/docker/test_observability.py. Prometheus itself is the full parser: the tests also run
every expression against a real server where Debian's ``prometheus`` is installed.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

# Grafana's own interval variables stand for a duration; every other $variable in vidpipe's
# dashboard sits inside a regex matcher, where ".*" is what "All" selects.
_GRAFANA_INTERVAL = re.compile(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|"
                               r"interval|range)\}")
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*|\[\[\w+\]\]")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]+)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\(\s*(.*?)\s*,\s*\w+\s*\)\s*$", re.S)
# Possessive, so that "rate(" is not read as the name "rat" followed by "e(".
_IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*+)(?!\s*\()")
# Words that stand where a series name could: binary operators, modifiers, number literals.
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
                       "by", "without", "on", "ignoring", "group_left", "group_right"})


def grafana_to_promql(expr: str, interval: str = "1m") -> str:
    """A dashboard expression with Grafana's variables replaced, so that Prometheus runs it."""
    return _GRAFANA_VARIABLE.sub(".*", _GRAFANA_INTERVAL.sub(interval, expr))


def metric_names(expr: str) -> set[str]:
    """The series names an expression (or a Grafana ``label_values(metric, label)``) reads."""
    if (label_values := _LABEL_VALUES.match(expr)) is not None:
        expr = label_values.group(1)
    expr = grafana_to_promql(expr)
    names = set(_NAME_MATCHER.findall(expr))
    expr = _STRING.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers name labels, not series
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges and subqueries
    expr = _GROUPING.sub(" ", expr)
    names.update(n for n in _IDENTIFIER.findall(expr) if n.lower() not in _KEYWORDS)
    return names


def exported_names(exposition: str) -> set[str]:
    """Every series name a Prometheus text page can produce, including the families declared
    (``# TYPE``) that have no sample yet: a labelled counter such as
    ``vidpipe_stream_reconnects_total`` shows its first sample only once something happens."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                "_created"), "summary": ("", "_count", "_sum", "_created"), "gauge": ("",)}
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


_SELECTOR = re.compile(r"\b(vidpipe_\w+)\s*(\{[^}]*\})?")


def selectors(expr: str) -> list[str]:
    """The series selectors (``name{matchers}``) an expression reads, variables replaced."""
    return [name + (matchers or "") for name, matchers in
            _SELECTOR.findall(grafana_to_promql(expr))]
