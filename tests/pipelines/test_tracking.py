"""Tracking (issue 18): ids from Roboflow's trackers on vidpipe's Detections, thresholds that
follow the model, the boxes of skipped frames, and --detect-every through the engine."""

import asyncio

import numpy as np
import pytest

from pipelines.analytics.config import AnalyticsConfig, TrackerSettings
from pipelines.analytics.stream import detect_interval
from pipelines.analytics.tracking import StreamTracker, confirm_detections
from pipelines.frame import Detections
from tests.pipelines.test_pipeline import assert_books_balance, build
from tests.support.fakes import FakeBackend, FakeSource, ListSink


def moving(frame: int, score: float = 0.9) -> Detections:
    """Two boxes drifting right and left, 4 px a frame, far apart."""
    a = [10 + 4 * frame, 10, 40 + 4 * frame, 40]
    b = [300 - 4 * frame, 200, 330 - 4 * frame, 240]
    return Detections(np.array([a, b], np.float32), np.full(2, score), np.array([0, 1]))


def test_confirmed_tracks_get_stable_ids_and_unconfirmed_ones_none():
    tracker = StreamTracker(TrackerSettings(), score_threshold=0.25, fps=30)
    seen = [tracker.update(moving(k), k / 30).track_id.tolist() for k in range(10)]
    assert seen[0] == seen[1] == [-1, -1]  # seen for 2 frames: not a confirmed track yet
    ids = seen[2]  # the default confirm_frames, 3
    assert -1 not in ids and len(set(ids)) == 2
    assert all(s == ids for s in seen[2:])


@pytest.mark.parametrize("fps, every, asked, confirmed_on", [
    (30, 1, 3, 3), (30, 2, 2, 2), (30, 3, 1, 2), (15, 1, 2, 2), (25, 1, 3, 3), (60, 1, 6, 6)])
def test_a_track_is_confirmed_after_the_same_time_at_every_rate_and_interval(fps, every, asked,
                                                                             confirmed_on):
    """``confirm_frames`` is a time (frames at 30 fps): the detections asked of the library
    are as many as cover it, each standing for the interval up to the next; at least one.
    The library names a track on its second detection at the earliest (one asked: a track
    missed after its first detection is kept as a lost one, not dropped). The objects come
    after an empty frame: nothing is confirmed on a tracker's very first frame."""
    assert confirm_detections(TrackerSettings().confirm_frames, every / fps) == asked
    tracker = StreamTracker(TrackerSettings(), 0.25, fps, interval_s=every / fps)
    tracker.update(Detections.empty(), 0.0)
    seen = [tracker.update(moving(k * every), k * every / fps).track_id.tolist()
            for k in range(1, 9)]
    first = next(k for k, ids in enumerate(seen) if -1 not in ids)
    assert first + 1 == confirmed_on


def test_a_model_scoring_low_still_starts_tracks():
    """The library's default activation (0.7) starts nothing on boxes scored 0.4; by default
    the tracker takes the model's score threshold."""
    ours = StreamTracker(TrackerSettings(), score_threshold=0.25, fps=30)
    library = StreamTracker(TrackerSettings(activation=0.7, high=0.6), 0.25, 30)
    for k in range(5):
        mine = ours.update(moving(k, score=0.4), k / 30)
        theirs = library.update(moving(k, score=0.4), k / 30)
    assert (mine.track_id >= 0).all() and (theirs.track_id == -1).all()


def test_the_boxes_between_two_detected_frames_are_interpolated_in_time():
    tracker = StreamTracker(TrackerSettings(), 0.25, 30)
    for k in range(0, 9, 3):
        tracker.update(moving(k), k / 30)
    before = tracker.last
    tracker.update(moving(9), 9 / 30)
    (between,) = tracker.between(before, [7 / 30])
    truth = moving(7)
    order = np.argsort(between.xyxy[:, 0])
    assert np.allclose(between.xyxy[order], truth.xyxy[np.argsort(truth.xyxy[:, 0])], atol=0.5)
    assert sorted(between.track_id.tolist()) == sorted(before.detections.track_id.tolist())


def test_objects_not_yet_tracked_on_both_sides_are_interpolated_by_overlap():
    """An object first seen on the detected frame before a gap has no confirmed track there:
    its boxes on both sides are paired by overlap, so the skipped frames still show it
    (with the track it has by the later frame); a box on one side only shows nowhere."""
    tracker = StreamTracker(TrackerSettings(), 0.25, 30)
    tracker.update(moving(0), 0.0)
    before = tracker.last
    assert (before.detections.track_id == -1).all()
    later = moving(3)
    stray = Detections(np.array([[500, 500, 520, 520]], np.float32), np.array([0.9]),
                       np.array([0]))
    both = Detections(np.concatenate([later.xyxy, stray.xyxy]),
                      np.concatenate([later.score, stray.score]),
                      np.concatenate([later.class_id, stray.class_id]))
    after = tracker.update(both, 3 / 30)
    one, two = tracker.between(before, [1 / 30, 2 / 30])
    for k, boxes in ((1, one), (2, two)):
        truth = moving(k)
        assert len(boxes) == 2
        order = np.argsort(boxes.class_id)
        assert np.allclose(boxes.xyxy[order], truth.xyxy, atol=0.5)
        assert sorted(boxes.track_id.tolist()) == sorted(after.track_id[:2].tolist())


def test_boxes_of_other_classes_are_never_paired():
    tracker = StreamTracker(TrackerSettings(), 0.25, 30)
    box = np.array([[10, 10, 40, 40]], np.float32)
    tracker.update(Detections(box, np.array([0.9]), np.array([0])), 0.0)
    before = tracker.last
    tracker.update(Detections(box + 1, np.array([0.9]), np.array([1])), 2 / 30)
    (between,) = tracker.between(before, [1 / 30])
    assert len(between) == 0


def tracked(every: int) -> AnalyticsConfig:
    return AnalyticsConfig(track=TrackerSettings(), detect_every=every)


@pytest.mark.parametrize("every", [2, 3, 7])
@pytest.mark.parametrize("policy", ["block", "drop_oldest"])
def test_detect_every_n_gives_every_frame_a_result_and_the_model_one_in_n(every, policy):
    source = FakeSource("a", 100)
    backend = FakeBackend()
    sink = ListSink(delay=0.002 if policy == "drop_oldest" else 0.0)
    pipeline, metrics, sink = build([source], backend, sink=sink, policy=policy,
                                    capacity=2, analytics=tracked(every))
    asyncio.run(pipeline.run())
    assert_books_balance(metrics, "a", 100)
    frames = [r.frame.index for r in sink.results]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)
    detected = [r.frame.index for r in sink.results if not r.predicted]
    if policy == "block":
        assert frames == list(range(100))
        # 0, N, 2N ... to the model; the last frame too, carrying the ones held for it
        assert detected == sorted({*range(0, 100, every), 99})
        assert sum(backend.batch_sizes) == len(detected)
    assert metrics.outcomes["a"]["processed"] == len(sink.results)
    assert all(r.analytics is not None for r in sink.results)


@pytest.mark.parametrize("rate, stride", [(10, 3), (5, 6)])
def test_detect_fps_gives_every_frame_a_result_and_the_model_that_rate(rate, stride):
    """Issue 35, item 2: the fake camera runs at 30 fps (pts k/30)."""
    source = FakeSource("a", 90)
    backend = FakeBackend()
    pipeline, metrics, sink = build([source], backend, analytics=AnalyticsConfig(
        track=TrackerSettings(), detect_fps=rate))
    asyncio.run(pipeline.run())
    assert_books_balance(metrics, "a", 90)
    assert [r.frame.index for r in sink.results] == list(range(90))
    detected = [r.frame.index for r in sink.results if not r.predicted]
    assert detected == sorted({*range(0, 90, stride), 89})
    assert sum(backend.batch_sizes) == len(detected)


def test_detect_fps_and_detect_every_are_one_or_the_other():
    with pytest.raises(ValueError, match="not both"):
        AnalyticsConfig(track=TrackerSettings(), detect_every=2, detect_fps=5)
    with pytest.raises(ValueError, match="needs one"):
        AnalyticsConfig(detect_fps=5)


def test_a_stop_hands_on_the_frames_held_for_the_detector():
    source = FakeSource("a", 10_000)
    pipeline, metrics, sink = build([source], FakeBackend(seconds_per_frame=0.002),
                                    analytics=tracked(5))

    async def main():
        task = asyncio.create_task(pipeline.run())
        await asyncio.sleep(0.3)
        await pipeline.stop(drain=True)
        await task

    asyncio.run(main())
    received = metrics.received["a"]
    assert_books_balance(metrics, "a", received)
    assert metrics.outcomes["a"]["processed"] == received == len(sink.results)
    assert [r.frame.index for r in sink.results] == list(range(received))


def test_a_stream_whose_pts_go_back_keeps_its_tracks():
    """A file played in a loop, a camera reconnected: pts start again from 0; the library
    skips every frame whose time is not later than the last, so the tracker's clock goes on."""
    tracker = StreamTracker(TrackerSettings(), 0.25, 30)
    pts = [k / 30 for k in range(10)] + [k / 30 for k in range(10)]
    seen = [tracker.update(moving(k), t).track_id.tolist() for k, t in enumerate(pts)]
    assert seen[5] == seen[15] and -1 not in seen[15]
    assert all(s == seen[2] for s in seen[2:])


@pytest.mark.parametrize("every, lazy", [(1, False), (3, True)])
def test_a_file_detected_every_nth_frame_converts_only_the_pictures_asked_for(small_clip,
                                                                             every, lazy):
    """With --detect-every N > 1 most of a file's frames never reach the model: its decoder
    leaves their RGB conversion until a stage asks (the carriers' preprocessing, a sink that
    draws); at N = 1 every picture is converted as it is decoded."""
    from models.zoo import resolve_model
    from pipelines.backends import open_backends
    from pipelines.metrics import PipelineMetrics
    from pipelines.options import PipelineOptions
    from pipelines.sources.file import FileSource

    path, spec = resolve_model("models/zoo/shapes-yolo/model.pruned50.int8.onnx")
    options = PipelineOptions(analytics=tracked(every))
    with FileSource(small_clip, "clip") as source:
        backends = open_backends(path, spec, [source], PipelineMetrics(), options, None)
        try:
            decoder = backends.decoder_for(source)
            pictures = [p for packet in source.packets() for p in decoder.decode(packet)][:6]
        finally:
            backends.runtime.close()
    assert pictures and all((p.image is None) == lazy for p in pictures)
    assert all(p.load is not None for p in pictures) == lazy


@pytest.mark.parametrize("every, detect_fps, fps, interval", [
    (1, None, 30, 1 / 30), (3, None, 30, 0.1), (1, 5.0, 30, 0.2), (1, 60.0, 30, 1 / 30)])
def test_the_tracker_is_told_the_time_between_the_models_frames(every, detect_fps, fps,
                                                                interval):
    """What confirm_frames is converted with: ``--detect-every`` frames of the stream, or
    ``--detect-fps``'s interval (never shorter than a frame)."""
    config = AnalyticsConfig(track=TrackerSettings(), detect_every=every, detect_fps=detect_fps)
    assert detect_interval(config, fps) == pytest.approx(interval)
