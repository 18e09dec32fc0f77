"""The plan made before a run's first frame (threads, runtime, batch size) is measured once and
reused from the cache while nothing it depends on changes; ``plan_cache=False`` measures again."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from models.zoo import resolve_model
from pipelines import threads
from pipelines.build import build_pipeline
from pipelines.metrics import PipelineMetrics
from pipelines.options import PipelineOptions
from pipelines.plan import plans_dir
from tests.support.fakes import ListSink


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("VIDPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def probes(monkeypatch) -> list[str]:
    """The names of the plan's measurements made, in order."""
    made: list[str] = []
    real = threads.probe_costs

    def counted(*args, **kwargs):
        made.append("costs")
        return real(*args, **kwargs)

    monkeypatch.setattr(threads, "probe_costs", counted)
    return made


def plan_of(clip: Path, model: str = "shapes-yolo", **options):
    path, spec = resolve_model(model)
    pipeline = build_pipeline([clip], ["clip"], path, spec, [ListSink()], PipelineMetrics(),
                              PipelineOptions(runtime="onnxruntime", frame_limit=2, **options))
    asyncio.run(pipeline.run())
    return pipeline.plan


def test_a_measured_plan_is_reused_by_the_next_run(small_clip, cache, probes, caplog):
    first = plan_of(small_clip)
    assert first is not None and not first.cached and probes == ["costs"]
    assert len(list(plans_dir().glob("*.json"))) == 1
    with caplog.at_level(logging.INFO, logger="pipelines.plan"):
        again = plan_of(small_clip)
    assert again is not None and again.cached and probes == ["costs"]  # nothing measured
    assert (again.threads, again.runtime, again.batch_size) == \
        (first.threads, first.runtime, first.batch_size)
    assert any("(cached, measured" in r.getMessage() for r in caplog.records)


def test_no_cache_measures_again_and_stores_the_new_plan(small_clip, cache, probes):
    plan_of(small_clip)
    fresh = plan_of(small_clip, plan_cache=False)
    assert not fresh.cached and probes == ["costs", "costs"]
    assert plan_of(small_clip).cached and len(probes) == 2


@pytest.mark.parametrize("change", ["options", "model", "source"])
def test_a_change_to_what_the_plan_depends_on_measures_again(change, small_clip, wide_clip,
                                                             cache, probes):
    plan_of(small_clip)
    if change == "options":
        plan = plan_of(small_clip, decode_threads=1)
    elif change == "model":
        plan = plan_of(small_clip, model=str(resolve_model("shapes-yolo")[0].parent /
                                             "model.int8.onnx"))
    else:
        plan = plan_of(wide_clip)  # another picture size
    assert not plan.cached and probes == ["costs", "costs"]


def test_a_damaged_entry_is_said_and_measured_again(small_clip, cache, probes, caplog):
    plan_of(small_clip)
    (entry,) = plans_dir().glob("*.json")
    entry.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="pipelines.plan"):
        assert not plan_of(small_clip).cached
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    assert json.loads(entry.read_text())["format"] == 1  # stored again, whole


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_cache_that_cannot_be_written_costs_only_the_reuse(small_clip, cache, probes,
                                                            caplog):
    cache.mkdir()
    cache.chmod(0o500)
    try:
        with caplog.at_level(logging.WARNING, logger="pipelines.plan"):
            assert not plan_of(small_clip).cached
            assert not plan_of(small_clip).cached
    finally:
        cache.chmod(0o700)
    assert any("cannot write" in r.getMessage() for r in caplog.records)


def test_a_cache_path_that_is_a_file_costs_only_the_reuse(small_clip, tmp_path, monkeypatch,
                                                          probes, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("VIDPIPE_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, logger="pipelines.plan"):
        assert not plan_of(small_clip).cached
    assert any("cannot write" in r.getMessage() for r in caplog.records)
