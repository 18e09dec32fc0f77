"""The code's shape holds: app's parts layered without a circle, the packages layered
app -> pipelines -> models, modules and function bodies short (``tests/support/layout.py``
measures; ``python -m tests.support.layout`` prints the figures)."""

from __future__ import annotations

from tests.support.layout import (
    APP_LAYERS,
    app_graph,
    app_part,
    cycles,
    function_sizes,
    layer_of,
    module_sizes,
    modules,
    package_imports,
)

MAX_MODULE_LINES = 300
MAX_BODY_LINES = 40


def test_every_part_of_app_has_a_layer() -> None:
    parts = {app_part(name) for name, _ in modules("app")}
    assert parts == {p for layer in APP_LAYERS for p in layer}


def test_no_import_runs_back_up_a_layer_of_app() -> None:
    upward = [f"{f.importer}:{f.line} imports {f.imported}"
              for (a, b), found in app_graph().items() if layer_of(b) <= layer_of(a)
              and not (layer_of(b) == layer_of(a) == len(APP_LAYERS) - 1)
              for f in found]
    assert upward == []


def test_app_has_no_circle() -> None:
    assert cycles(set(app_graph())) == []


def test_packages_are_layered_app_pipelines_models() -> None:
    allowed = {("app", "pipelines"), ("app", "models"), ("pipelines", "models")}
    assert set(package_imports()) <= allowed


def test_no_module_is_over_300_lines() -> None:
    assert {p: n for p, n in module_sizes().items() if n > MAX_MODULE_LINES} == {}


def test_no_function_body_is_over_40_lines() -> None:
    assert [(f.where, f.body) for f in function_sizes() if f.body > MAX_BODY_LINES] == []


def test_the_measures_see_what_they_measure() -> None:
    """The rules above are not empty: the graph has edges, the sizes have rows, and a known
    import (the service's errors) is among the edges."""
    assert ("service", "errors") in app_graph()
    assert len(module_sizes()) > 150 and len(function_sizes()) > 1000
    assert package_imports()[("app", "pipelines")] > 0


def test_the_walk_counts_stays_files_and_returns() -> None:
    from tests.support.walk import figures

    calls = [("a.py", "f"), ("a.py", "g"), ("b.py", "h"), ("a.py", "i"), ("c.py", "j")]
    row = figures(calls)
    assert (row["calls"], row["stays"], row["files"], row["returns"]) == (5, 4, 3, 1)
