"""Issue 35, item 3: motion-gated detection — measured on the codec's vectors or on the
pixels, decided per frame, and every skipped frame still a result of its own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.analytics.config import AnalyticsConfig, MaskConfig, TrackerSettings
from pipelines.decode.motion import MOVING_AREA, MotionGate, MotionInput, MotionMeter
from pipelines.decode.picture import DecodedPicture
from pipelines.frame import Batch, Frame
from pipelines.infer.stage import _fold_skipped
from pipelines.sinks.quiet import frame_records
from pipelines.synthetic.quiet import Visit, make_quiet_clip, mask_flags
from pipelines.wiring import carry_skipped


def picture(luma: np.ndarray) -> DecodedPicture:
    return DecodedPicture(None, 0.0, load=lambda: np.zeros((1, 1, 3), np.uint8),
                          motion=MotionInput(luma))


def still(rng: np.random.Generator, noise: float = 3.0) -> np.ndarray:
    base = np.tile(np.linspace(40, 200, 640, dtype=np.float32), (360, 1))
    return np.clip(base + rng.normal(0, noise, base.shape), 0, 255).astype(np.uint8)


def test_pixels_see_a_moving_square_not_the_sensor_noise_nor_what_a_mask_hides():
    rng = np.random.default_rng(0)
    masks = [MaskConfig(name="clock", polygon=[(400, 0), (640, 0), (640, 120), (400, 120)])]
    meter = MotionMeter("pixels", lambda: masks, "cam")
    assert meter.measure(picture(still(rng))) is None  # the first picture: nothing to compare
    quiet = [meter.measure(picture(still(rng))) for _ in range(30)]
    assert max(quiet) < MOVING_AREA / 10, quiet
    hidden = still(rng)
    hidden[20:100, 450:600] = 255  # the clock changes: inside the mask
    assert meter.measure(picture(hidden)) < MOVING_AREA / 10
    moving = still(rng)
    moving[200:260, 100:140] = 0  # a 40x60 object: 1 % of the picture
    assert meter.measure(picture(moving)) > 10 * MOVING_AREA


def test_the_gate_detects_on_motion_objects_and_heartbeats_and_skips_the_rest():
    seen_until = [float("-inf")]
    gate = MotionGate(heartbeat_s=2.0, watch=lambda: seen_until[0])
    step = 0.125  # 8 fps: times exact in binary
    detected = []
    for k in range(60):
        gate.note(0.01 if 15 <= k <= 17 else 0.0)  # motion on frames 15-17
        if k == 30:
            seen_until[0] = 4.5  # an object seen on a detected frame: watched until 4.5 s
        if gate.take(k * step, step):
            detected.append(k)
    # the first frame (a heartbeat), motion and the 1 s after it (2.125 s -> 3.125 s), the
    # object's time (3.75 s -> 4.5 s), then a heartbeat 2 s after the last detected frame
    assert detected == [0, *range(15, 26), *range(30, 37), 52]
    assert gate.reasons == {"motion": 11, "objects": 7, "heartbeat": 2, "idle": 40}


def test_a_files_frames_wait_for_the_news_of_those_sent_and_are_chosen_as_with_it():
    """A frame the gate would skip while frames sent to the model have no result yet waits,
    and the frames after it with it; once the results are in it is chosen with them: the
    choice is what results known at once give, however late they come."""
    from pipelines.decode.picker import DetectionPicker
    from pipelines.decode.selection import FrameSelection
    from pipelines.sinks.pictures import keep_none

    step = 0.125  # 8 fps; an object stands in view on frames 0-23, moving on 0-1 only

    def choose(results_late: bool) -> list[tuple[int, str | None]]:
        seen_until = [float("-inf")]
        selection = FrameSelection(DetectionPicker(), MotionGate(2.0, lambda: seen_until[0]),
                                   keep_none, waits_for_news=results_late)
        out, unread = [], []

        def results_in(frames: list[Frame]) -> None:  # the tracker's news of them
            for f in frames:
                if not f.skipped and f.index < 24:
                    seen_until[0] = f.pts + 1.0

        for k in range(48):
            chosen = selection.select(Frame("cam", k, k * step, 0.0, None),
                                      0.01 if k < 2 else 0.0, step)
            if not results_late:
                results_in(chosen)
            else:  # results only once the selection waits for them
                unread += chosen
                if selection.waiting:
                    assert selection.held >= 1
                    results_in(unread)
                    resumed = selection.resume(step)
                    unread = resumed
                    chosen = chosen + resumed
            out += [(r.index, r.skipped) for f in chosen for r in f.with_riders()]
        out += [(r.index, r.skipped) for f in selection.release(step) for r in f.with_riders()]
        return out

    late, at_once = choose(True), choose(False)
    assert [i for i, _ in late] == list(range(48))
    assert late == at_once
    assert at_once[23] == (23, None) and at_once[40][1] == "idle"  # the object's, then none


def frame(stream: str, index: int, skipped: bool = False) -> Frame:
    return Frame(stream, index, index / 30, 0.0, None, skipped="idle" if skipped else None)


def test_a_call_carries_its_skipped_frames_in_each_streams_order():
    items = [frame("a", 0, True), frame("b", 0, True), frame("a", 1), frame("a", 2, True),
             frame("b", 1, True)]
    inferred, passed = _fold_skipped(items)
    assert [(f.stream_id, f.index) for f in inferred] == [("a", 1)]
    assert [r.index for r in inferred[0].riders] == [0]  # a's skipped frame 0 rides with 1
    # what no later frame of its stream carries leaves after the batch, in order
    assert [(f.stream_id, f.index) for f in passed] == [("b", 0), ("a", 2), ("b", 1)]


def test_a_live_queue_hands_an_evicted_skipped_frame_on_instead_of_dropping_it():
    newer = frame("a", 5)
    old = frame("a", 4, True)
    old.riders = [frame("a", 3)]
    assert carry_skipped(old, newer) is None
    assert [r.index for r in newer.riders] == [3, 4] and newer.riders[1].skipped
    detected = frame("a", 7)
    detected.riders = [frame("a", 6, True)]
    batch = Batch([frame("a", 8)], np.zeros((1, 3, 2, 2), np.float32), [None])  # type: ignore[list-item]
    left = carry_skipped(detected, batch)
    assert left is detected and detected.riders == []  # dropped, its skipped rider kept
    assert [r.index for r in batch.frames[0].riders] == [6]
    assert carry_skipped(frame("b", 1, True), frame("a", 9)) is not None  # another stream


def test_motion_leaves_frames_to_a_tracker():
    with pytest.raises(ValueError, match="needs one"):
        AnalyticsConfig(motion="pixels")
    assert AnalyticsConfig(track=TrackerSettings(), motion="auto").thins


@pytest.fixture(scope="module")
def quiet_clip(tmp_path_factory) -> Path:
    """12 s of a quiet camera (15 fps, 640x360): one visitor, from 3.7 s to 9.7 s."""
    return make_quiet_clip(tmp_path_factory.mktemp("quiet") / "quiet.mp4", seconds=12,
                           seed=1)


@pytest.mark.parametrize("motion", ["vectors", "pixels"])
def test_a_quiet_camera_gated_by_motion_gives_the_boxes_of_every_frame(quiet_clip, tmp_path,
                                                                       motion):
    """Against the same run without gating: the same boxes on every frame, most frames
    without the model (skipped_idle, each a line of its own), and every frame counted."""
    from app.run.request import RunRequest, run_request

    truth = json.loads(quiet_clip.with_suffix(".truth.json").read_text())

    def run(out: Path, **gating) -> tuple[list[dict], dict]:
        run_request(RunRequest(sources=[str(quiet_clip)], out=out, track="bytetrack",
                               **gating))
        lines = frame_records((out / "detections.jsonl").read_text().splitlines())
        return lines, json.loads((out / "summary.json").read_text())

    every, _ = run(tmp_path / "off")
    gated, summary = run(tmp_path / motion, motion=motion, masks=mask_flags(truth))
    assert [x["frame"] for x in gated] == list(range(truth["frame_count"]))
    assert [x["detections"] for x in gated] == [x["detections"] for x in every]
    assert sum(bool(x["detections"]) for x in every) > 20  # the visitor was found
    skipped = [x["frame"] for x in gated if x.get("skipped") == "idle"]
    (visit,) = [Visit(**v) for v in truth["visits"]]
    wide = visit.height * truth["height"]  # the person photographs are square
    shown = [k for k in skipped if (x := visit.centre_x(k / truth["fps"], truth["width"], wide))
             is not None and -wide / 4 < x < truth["width"] + wide / 4]  # a quarter in
    assert not shown
    assert len(skipped) >= 45  # of the 90 frames without a visitor
    outcomes = summary["streams"]["quiet"]["outcomes"]
    assert outcomes == {"processed": truth["frame_count"] - len(skipped),
                        "skipped_idle": len(skipped)}


class StillDecoder:
    """A decoder of a still picture that gives no luma (like NVDEC's): motion is measured on
    its pictures."""

    def decode(self, packet: int) -> list[DecodedPicture]:
        return [DecodedPicture(np.full((48, 64, 3), 90, np.uint8), packet / 30.0)]

    def close(self) -> None:
        pass


def test_a_live_still_stream_behind_a_slow_sink_skips_and_drops_nothing_skipped():
    """Under drop_oldest with a slow consumer, the skipped frames the queues evict ride on
    with newer ones: all but the first frame are skipped_idle, and the books balance."""
    import asyncio

    from tests.pipelines.test_pipeline import assert_books_balance, build
    from tests.support.fakes import FakeBackend, FakeSource, ListSink

    class Blind(FakeBackend):  # finds nothing: no object keeps the detector on
        def infer(self, feeds):
            out = super().infer(feeds)
            out["scores"][:] = 0.0
            return out

    source = FakeSource("a", 200)
    pipeline, metrics, sink = build([source], Blind(seconds_per_frame=0.002),
                                    decoder=StillDecoder(), sink=ListSink(delay=0.003),
                                    policy="drop_oldest", capacity=2,
                                    analytics=AnalyticsConfig(track=TrackerSettings(),
                                                              motion="pixels"))
    asyncio.run(pipeline.run())
    assert_books_balance(metrics, "a", 200)
    outcomes = metrics.outcomes["a"]
    assert outcomes["skipped_idle"] >= 199 - outcomes["dropped_full"]
    assert outcomes["dropped_full"] <= 1  # only the first frame is not skipped
    indexes = [r.frame.index for r in sink.results]
    assert indexes == sorted(indexes) and len(indexes) == 200 - outcomes["dropped_full"]


def test_a_codec_without_vectors_is_measured_on_its_pixels():
    """Predicted frames that keep coming without vectors (a codec FFmpeg exports none for):
    after NO_VECTORS_AFTER of them the meter reads the pixels, and says so in the log."""
    from pipelines.decode.motion import NO_VECTORS_AFTER

    rng = np.random.default_rng(1)
    meter = MotionMeter("auto", lambda: [], "cam")
    key = DecodedPicture(None, 0.0, load=lambda: np.zeros((1, 1, 3), np.uint8),
                         motion=MotionInput(still(rng), None, key=True))
    assert meter.measure(key) is None and meter.mode == "auto"  # an intra frame: no news
    seen = [meter.measure(picture(still(rng))) for _ in range(NO_VECTORS_AFTER + 2)]
    assert seen[:NO_VECTORS_AFTER - 1] == [None] * (NO_VECTORS_AFTER - 1)
    assert meter.mode == "pixels" and seen[-1] is not None and seen[-1] < MOVING_AREA


def _vectors(blocks: list[tuple[int, int]], shift: int = 8) -> np.ndarray:
    """AVMotionVector-like records: each 16-pixel block (column, row) moved ``shift`` px."""
    kind = np.dtype([("dst_x", np.int16), ("dst_y", np.int16), ("motion_x", np.int32),
                     ("motion_y", np.int32), ("motion_scale", np.uint16)])
    out = np.zeros(len(blocks), kind)
    for i, (col, row) in enumerate(blocks):
        out[i] = (col * 16 + 8, row * 16 + 8, shift, 0, 1)
    return out


def _moved(meter: MotionMeter, blocks: list[tuple[int, int]]) -> float | None:
    luma = np.zeros((360, 640), np.uint8)
    return meter.measure(DecodedPicture(None, 0.0, load=lambda: np.zeros((1, 1, 3), np.uint8),
                                        motion=MotionInput(luma, _vectors(blocks))))


def test_vectors_count_a_patch_that_goes_on_not_one_frames_patch():
    """A bitrate-capped encoder's vectors on a flat sky: one frame's patch now and then, then
    none — never motion. An object: a patch moving on frame after frame — motion from its
    second frame."""
    meter = MotionMeter("vectors", lambda: [], "cam")
    patch = [(c, r) for c in range(10, 13) for r in range(2, 5)]
    flat = [(c, r) for c in range(30, 33) for r in range(15, 18)]
    assert _moved(meter, patch) == 0.0  # a patch alone, as on the sky
    assert _moved(meter, [(1, 1)]) == 0.0  # then scattered noise
    assert _moved(meter, flat) == 0.0  # another lone patch, far from the first
    walking = [[(c + k, r) for c in range(5, 9) for r in range(10, 15)] for k in range(4)]
    seen = [_moved(meter, blocks) for blocks in walking]
    assert seen[0] == 0.0 and all(s is not None and s > 10 * MOVING_AREA for s in seen[1:]), seen


def test_fewer_moved_blocks_than_any_patch_needs_is_no_motion_at_once():
    """The meter's shortcut (FEWEST_IN_PATCH) is exact: no grid with fewer moved blocks
    keeps any after the opening, and a 2x2 corner with that many does."""
    import cv2

    from pipelines.decode.motion import FEWEST_IN_PATCH, PATCH

    rng = np.random.default_rng(1)
    for _ in range(2000):
        grid = np.zeros((23, 40), np.uint8)
        count = int(rng.integers(1, FEWEST_IN_PATCH))
        grid[rng.integers(0, 23, count), rng.integers(0, 40, count)] = 1
        assert not cv2.morphologyEx(grid, cv2.MORPH_OPEN, PATCH).any()
    corner = np.zeros((23, 40), np.uint8)
    corner[:2, :2] = 1
    assert cv2.morphologyEx(corner, cv2.MORPH_OPEN, PATCH).any()
