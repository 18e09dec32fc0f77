"""``vidpipe bench --overhead``: the null detector answers no box, and the engine's rows count
every frame of every stream through every stage, from memory and from files."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from app.bench.overhead import engine_row, hand_loop_row
from app.bench.overhead_parts import NULL_SIZE, decode_once, null_model, thread_group
from pipelines.synthetic.quiet import make_quiet_clip


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("overhead") / "quiet.mp4"
    return make_quiet_clip(path, seconds=2.0, fps=15, size=(320, 180), seed=1, active=0.0,
                           clock=False)


def test_the_null_detector_scores_every_candidate_zero_for_any_batch(tmp_path):
    path, spec = null_model(tmp_path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(0).random((3, 3, NULL_SIZE, NULL_SIZE), np.float32)
    (out,) = session.run(None, {"images": images})
    assert out.shape[:2] == (3, 4 + spec.num_classes) and not out.any()


@pytest.mark.parametrize(("source", "mode"), [("memory", "detect"), ("memory", "gated"),
                                              ("file", "detect")])
def test_every_frame_of_every_stream_is_counted_once(tmp_path, clip, source, mode):
    model = null_model(tmp_path / "null")
    memory = {mode == "gated": decode_once(clip, model[1], mode == "gated")}
    row = engine_row(source, mode, 3, 90, clip, model, memory, 4, tmp_path)
    assert row["frames"] == 3 * 30  # each stream's 30 frames (2 s at 15 fps): processed or skipped
    if mode == "gated":  # a still scene: the model sees the first frame, then the heartbeat's
        assert row["skipped"] >= 3 * 25
    else:
        assert row["skipped"] == 0
    assert row["by_part_ms"]["event loop"] > 0 and row["by_part_ms"]["decode"] > 0


def test_the_hand_loop_decodes_every_frame_of_the_clip(clip, tmp_path):
    _, spec = null_model(tmp_path)
    row = hand_loop_row(clip, spec, gated=False)
    assert row["frames"] == 30 and row["cpu_ms_per_frame"] > 0


@pytest.mark.parametrize(("name", "part"), [("MainThread", "event loop"),
                                            ("vidpipe-decode-s0_0", "decode"),
                                            ("vidpipe-decode-cam_1_0", "decode"),
                                            ("vidpipe-infer_1", "infer"),
                                            ("vidpipe-preprocess-s3_0", "preprocess"),
                                            ("Thread-7", "other")])
def test_threads_are_told_apart_by_their_names(name, part):
    assert thread_group(name) == part


def test_against_another_tree_a_row_runs_on_both_codes_in_turn(tmp_path, clip):
    from pathlib import Path

    from app.bench.overhead import _rows_apart

    root = Path(__file__).resolve().parents[2]  # this tree standing in for another commit
    rows = _rows_apart("memory", "gated", 2, 60, clip, tmp_path / "null", 4, ("other", root), 1)
    assert [r["code"] for r in rows] == ["other", "this"]  # odd k: the other code first
    assert all(r["frames"] == 60 and r["skipped"] >= 2 * 25 for r in rows)
