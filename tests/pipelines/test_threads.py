"""The CPU thread plan: from measured costs, a core is kept for preparing only when it is the
heavier side; given thread counts always win; the probes measure something real."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from models.data import make_clip
from models.spec import InputSpec
from models.zoo import resolve_model
from pipelines import threads
from pipelines.threads import StageCosts, measure_infer_ms, measure_prepare_ms, plan_threads


@pytest.mark.parametrize("costs, cores, infer, workers, decode, words", [
    # shapes-yolo FP32 on 720p: both cores to inference, as two one-thread calls
    (StageCosts(16.1, 9.3), 2, 1, 2, 1, "inference-bound, all 2 cores to it, as 2 calls"),
    # its pruned variant: one decoder thread keeps up with one inference thread
    (StageCosts(3.7, 6.4), 2, 1, 1, 1, "preparing costs as much"),
    (StageCosts(3.7, 8.0), 2, 1, 1, 2, "2 decoder threads"),  # decoding over twice inference
    (StageCosts(3.7, 6.4), 8, 7, 1, 8, "7 of 8"),  # 7 inference threads outrun one decoder
    (StageCosts(3.7, 12.8, streams=2), 2, 1, 1, 1, "1 decoder thread per file"),
    (StageCosts(3.7, 25.6, streams=4), 8, 7, 1, 2, "2 decoder threads per file"),
    (StageCosts(3.7, 6.4), 5, 2, 2, 5, "as 2 calls at once on 2 threads each"),
    (StageCosts(5.0, None), 2, 1, 1, 1, "live source"),
    (StageCosts(5.0, None), 3, 2, 1, 1, "live source"),  # one call at a time for a camera
    (StageCosts(5.0, 9.0), 1, 1, 1, 1, "1 core"),
    (None, 4, 2, 2, 1, "not measured"),
])
def test_plan_follows_the_measured_costs(costs, cores, infer, workers, decode, words) -> None:
    plan = plan_threads(costs, cores)
    assert (plan.infer, plan.infer_workers, plan.decode) == (infer, workers, decode), plan
    assert words in plan.reason, plan


def test_given_threads_win() -> None:
    plan = plan_threads(StageCosts(3.7, 6.4), 2, infer_threads=2, decode_threads=3)
    assert (plan.infer, plan.infer_workers, plan.decode, plan.reason) == (2, 1, 3, "given")
    assert plan_threads(StageCosts(3.7, 6.4), 2, decode_threads=1).decode == 1
    assert plan_threads(StageCosts(3.7, 6.4), 2, infer_threads=1).decode == 1
    assert plan_threads(StageCosts(3.7, 6.4), 2, decode_threads=0).decode == 0  # FFmpeg's
    assert plan_threads(None, 2, infer_threads=1, decode_threads=0).decode == 0


def test_probes_time_the_model_and_the_clip(tmp_path: Path) -> None:
    path, spec = resolve_model("shapes-yolo")
    clip = make_clip(tmp_path / "c.mp4", seed=1, frames=10, size=(320, 192))
    infer = measure_infer_ms(path, (3, spec.input.height, spec.input.width))
    prepared = measure_prepare_ms(clip, spec.input)
    assert infer > 0 and prepared is not None and prepared > 0


def test_the_prepare_probe_leaves_the_decoders_start_up_out(tmp_path: Path, monkeypatch) -> None:
    # a first picture that takes 0.4 s (the decoder starting up, exaggerated) is not timed
    class SlowFirst(threads.OpenCVPreprocessor):
        prepared = 0

        def prepare(self, frame):
            SlowFirst.prepared += 1
            if SlowFirst.prepared == 1:
                time.sleep(0.4)
            return super().prepare(frame)

    monkeypatch.setattr(threads, "OpenCVPreprocessor", SlowFirst)
    clip = make_clip(tmp_path / "c.mp4", seed=1, frames=8, size=(320, 192))
    prepared = measure_prepare_ms(clip, InputSpec(width=64, height=64))
    assert SlowFirst.prepared == 8
    assert prepared is not None and 0 < prepared < 40  # 0.4 s over 8 frames would read >= 50 ms


@pytest.mark.parametrize(("frames", "timed"), [(1, False), (2, True)])
def test_a_clip_needs_a_second_picture_to_be_timed(tmp_path: Path, frames: int,
                                                   timed: bool) -> None:
    clip = make_clip(tmp_path / "c.mp4", seed=1, frames=frames, size=(320, 192))
    prepared = measure_prepare_ms(clip, InputSpec(width=64, height=64))
    assert (prepared is not None and prepared > 0) if timed else prepared is None


def test_an_unreadable_file_has_no_prepare_cost(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\0" * 100)
    spec = InputSpec(width=64, height=64)
    assert measure_prepare_ms(junk, spec) is None


def test_a_probe_that_cannot_run_the_model_leaves_the_error_to_the_model_check(
        tmp_path: Path) -> None:
    from pipelines.threads import probe_costs

    path, spec = resolve_model("shapes-yolo")
    wrong = spec.model_copy(update={"input": spec.input.model_copy(
        update={"width": 300, "height": 300, "dtype": "uint8"})})
    assert probe_costs(path, wrong, []) is None  # check_compatible then names the mismatch
    assert probe_costs(path, spec, []) is not None
