"""Events (issue 19): an object's lifecycle (new, throttled updates, stationary, end), the
packet ring a clip is cut from, and the clip itself (packets copied, from a key frame)."""

import time

import av
import numpy as np
import pytest

from pipelines.events.config import ObjectSettings
from pipelines.events.lifecycle import ObjectLifecycle
from pipelines.events.media import MediaStore, write_clip
from pipelines.events.ring import PacketRing
from pipelines.frame import Detections, Frame, Result


def result(index: int, boxes: list[list[float]], ids: list[int], fps: float = 10.0,
           classes: list[int] | None = None) -> Result:
    frame = Frame("cam", index, index / fps, 0.0, None)
    n = len(boxes)
    d = Detections(np.asarray(boxes, np.float32).reshape(-1, 4), np.full(n, 0.9),
                   np.asarray(classes if classes is not None else [0] * n), np.asarray(ids))
    return Result(frame, d, {}, analytics={"lines": {}, "zones": {}})


def kinds(events):
    return [(e.kind, e.obj.track_id) for e in events]


def lifecycle(**settings) -> ObjectLifecycle:
    return ObjectLifecycle(ObjectSettings(**settings), None, fps=10.0, end_s=1.0)


def test_an_object_is_new_once_updated_when_it_moves_and_ends_when_gone():
    life = lifecycle(update_s=0.5, move=0.1)
    seen = []
    for k in range(20):  # 10 px a frame, a 20 px box: it moves 0.5 of its size a frame
        seen += [(k, e.kind) for e in life.update(result(k, [[10 * k, 0, 10 * k + 20, 20]],
                                                         [7]))]
    assert seen[0] == (0, "new")
    updates = [k for k, kind in seen if kind == "update"]
    assert updates == list(range(5, 20, 5))  # at most every 0.5 s (5 frames at 10 fps)
    gone = []
    for k in range(20, 40):  # not seen any more: ends 1 s (end_s) after it was last seen
        gone += [(k, e.kind) for e in life.update(result(k, [], []))]
    assert gone == [(29, "end")]


def test_a_parked_object_says_stationary_once_then_nothing_until_it_moves():
    life = lifecycle(update_s=0.0, move=0.1, stationary_s=2.0)
    events = []
    box = [100, 100, 140, 140]
    for k in range(200):  # 20 s still, jittering by a pixel
        jitter = k % 2
        events += life.update(result(k, [[box[0] + jitter, box[1], box[2] + jitter, box[3]]],
                                     [3]))
    assert [(e.kind, e.changes) for e in events] == [("new", []), ("update", ["stationary"])]
    assert events[1].frame.index == 20 and events[1].obj.stationary
    moved = life.update(result(200, [[200, 100, 240, 140]], [3]))
    assert [(e.kind, sorted(e.changes)) for e in moved] == [("update", ["box", "stationary"])]
    assert not moved[0].obj.stationary


def test_unconfirmed_tracks_and_other_classes_have_no_lifecycle():
    life = ObjectLifecycle(ObjectSettings(), {1}, fps=10.0, end_s=1.0)
    events = life.update(result(0, [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10]],
                                [-1, 4, 5], classes=[1, 0, 1]))
    assert kinds(events) == [("new", 5)]


def test_a_class_change_is_said_at_once_and_the_stream_end_ends_everyone():
    life = lifecycle(update_s=10.0)
    life.update(result(0, [[0, 0, 10, 10], [50, 0, 60, 10]], [1, 2]))
    changed = life.update(result(1, [[0, 0, 10, 10], [50, 0, 60, 10]], [1, 2], classes=[0, 1]))
    assert [(e.kind, e.obj.track_id, e.changes) for e in changed] == [("update", 2, ["class"])]
    assert sorted(kinds(life.finish(changed[0].frame))) == [("end", 1), ("end", 2)]
    assert life.objects == {}


def test_the_best_picture_is_the_highest_score_times_area_of_a_detected_frame():
    life = lifecycle()
    pictures = []
    for k, (size, score) in enumerate([(10, 0.9), (30, 0.5), (20, 0.95)]):
        r = result(k, [[0, 0, size, size]], [1])
        image = np.full((64, 64, 3), k, np.uint8)
        r.frame.image = image
        r.detections.score[:] = score
        pictures.append(r.frame.image)
        life.update(r)
    best = life.objects[1].best
    assert best is not None and best.frame == 1 and best.image is pictures[1]


def packets_of(path):
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return stream, [(bytes(p), p.pts, p.is_keyframe, float(p.pts * p.time_base))
                        for p in container.demux(stream) if p.size]


@pytest.fixture(scope="module")
def gop_clip(tmp_path_factory):
    """4 s at 25 fps, a key frame every 25 frames (1 s), no B-frames."""
    path = tmp_path_factory.mktemp("gop") / "gop.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25, options={"g": "25", "bf": "0",
                                                             "sc_threshold": "0"})
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        for k in range(100):
            image = np.zeros((96, 160, 3), np.uint8)
            image[:, (k * 3) % 160:(k * 3) % 160 + 20] = 255
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode(None))
    return path


def fill(ring, path):
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        ring.new_segment(stream)
        for packet in container.demux(stream):
            ring.append(packet)


def test_a_clip_starts_on_the_last_key_frame_before_it_and_copies_the_packets(gop_clip,
                                                                          tmp_path):
    ring = PacketRing(seconds=60, max_bytes=10 ** 8)
    fill(ring, gop_clip)
    cut = ring.cut(1.5, 2.5)
    assert cut is not None and cut.packets[0].keyframe
    assert cut.start == pytest.approx(1.0) and cut.end == pytest.approx(2.48)
    seconds = write_clip(tmp_path / "clip.mp4", cut)
    assert seconds == pytest.approx(1.52)  # 1.0 to 2.48, and the last frame's 0.04 s
    _, source = packets_of(gop_clip)
    _, copied = packets_of(tmp_path / "clip.mp4")
    wanted = [data for data, _, _, at in source if 1.0 - 1e-6 <= at <= 2.5]
    assert [data for data, *_ in copied] == wanted  # the same bytes: nothing re-encoded
    with av.open(str(tmp_path / "clip.mp4")) as container:
        shown = [float(f.pts * f.time_base) for f in container.decode(video=0)]
        # on its own timeline: from 0, its duration what write_clip said, its start dated
        assert len(shown) == len(wanted) and shown[0] == 0.0
        assert container.duration / 1e6 == pytest.approx(seconds, abs=1e-3)
        assert container.metadata["creation_time"].startswith(
            time.strftime("%Y-%m-%dT", time.gmtime(cut.started_at)))
    assert not list(tmp_path.glob(".*partial"))


def test_the_ring_keeps_its_seconds_and_bytes(gop_clip):
    ring = PacketRing(seconds=1.5, max_bytes=10 ** 8)
    fill(ring, gop_clip)
    assert ring.newest == pytest.approx(3.96)
    cut = ring.cut(0.0, 4.0)  # the ring reaches back 1.5 s: from its oldest key frame
    assert cut is not None and cut.start == pytest.approx(3.0)
    small = PacketRing(seconds=60, max_bytes=2000)
    fill(small, gop_clip)
    assert small.size_bytes <= 2000 + max(len(p.data) for p in small.cut(0, 9).packets)



def test_a_looped_file_keeps_the_ring_s_clock_rising_and_a_clip_across_the_loop_plays(
        gop_clip, tmp_path):
    ring = PacketRing(seconds=60, max_bytes=10 ** 8)
    fill(ring, gop_clip)
    with av.open(str(gop_clip)) as container:  # played again: its pts start at 0 again
        for packet in container.demux(container.streams.video[0]):
            ring.append(packet)
    assert ring.newest == pytest.approx(7.96, abs=0.05)
    cut = ring.cut(3.0, 5.0)
    assert cut is not None and [p.at for p in cut.packets] == sorted(p.at for p in cut.packets)
    write_clip(tmp_path / "across.mp4", cut)
    with av.open(str(tmp_path / "across.mp4")) as container:
        times = [float(f.pts * f.time_base) for f in container.decode(video=0)]
    assert len(times) == len(cut.packets) and times == sorted(times)
    assert times[-1] - times[0] == pytest.approx(2.0, abs=0.1)


def test_a_reconnect_follows_on_by_the_time_away(gop_clip, monkeypatch):
    """A camera's new connection restarts its pts; the ring follows on by the time the
    camera was away, as the stream's timeline (StreamTimeline) does."""
    clock = [1000.0]
    monkeypatch.setattr("pipelines.events.ring.time.monotonic", lambda: clock[0])
    ring = PacketRing(seconds=60, max_bytes=10 ** 8)
    fill(ring, gop_clip)  # read at one instant: 0 .. 3.96 on the ring's clock
    clock[0] += 12.0  # away 12 s
    fill(ring, gop_clip)  # a new segment, its pts from 0 again
    assert ring.newest == pytest.approx(3.96 + 12.0 + 3.96)


def test_media_are_pruned_by_age_then_by_size(tmp_path):
    import os
    store = MediaStore(tmp_path, retain_hours=1.0, retain_mb=1.0)
    folder = store.folder("cam")
    now = 1_000_000.0
    for name, age_s, size in (("a.mp4", 7200, 10), ("b.mp4", 60, 600_000),
                              ("c.mp4", 30, 600_000), ("d.jpg", 10, 100)):
        path = folder / name
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age_s, now - age_s))
    assert store.prune(now) == 2  # a: too old; b: the oldest while over 1 MB
    assert sorted(p.name for p in folder.iterdir()) == ["c.mp4", "d.jpg"]


def test_a_recording_source_passes_a_paced_file_s_flush_on_without_keeping_it(gop_clip):
    """A paced file ends its packets with None (the decoder's flush): the ring keeps the
    packets, and the None goes on to the decoder."""
    from pipelines.events.ring import RecordingSource

    class Flushing:
        epoch = 0

        def __init__(self) -> None:
            self.container = av.open(str(gop_clip))
            self.video = self.container.streams.video[0]

        def packets(self):
            yield from self.container.demux(self.video)
            yield None

        def close(self) -> None:
            self.container.close()

    source = Flushing()
    ring = PacketRing(60, 10 ** 8)
    seen = list(RecordingSource(source, ring).packets())
    source.close()
    assert seen[-1] is None and ring.newest == pytest.approx(3.96)


def test_a_clip_of_b_frames_keeps_the_reference_frames_they_need(tmp_path):
    """With B-frames, a reference frame shown after the clip's end comes before the
    B-frames shown within it in decoding order: it is kept, and every frame decodes."""
    path = tmp_path / "bframes.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25, options={"g": "25", "bf": "2",
                                                             "sc_threshold": "0"})
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        for k in range(50):
            image = np.full((96, 160, 3), (k * 5) % 255, np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode(None))
    ring = PacketRing(60, 10 ** 8)
    fill(ring, path)
    cut = ring.cut(1.0, 1.45)
    assert cut is not None, [(p.at, p.keyframe) for p in ring.cut(0, 9).packets]
    assert any(p.at > 1.45 for p in cut.packets)  # the reference shown after the end
    write_clip(tmp_path / "clip.mp4", cut)
    with av.open(str(tmp_path / "clip.mp4")) as container:
        shown = [float(f.pts * f.time_base) for f in container.decode(video=0)]
    # on the clip's own timeline: the key frame at 1.0 is shown at 0
    assert [t for t in shown if t <= 0.45] == pytest.approx([k / 25 for k in range(12)])


def test_an_output_that_raises_loses_its_event_alone():
    from models.zoo import resolve_model
    from pipelines.events.config import EventSettings
    from pipelines.events.sink import EventSink
    from pipelines.metrics import PipelineMetrics

    class Broken:
        name = "broken"

        def publish(self, event):
            raise OSError("disk full")

        def publish_state(self, stream, state):
            raise OSError("disk full")

    class Kept:
        name = "kept"

        def __init__(self) -> None:
            self.events = []

        def publish(self, event):
            self.events.append(event)

        def publish_state(self, stream, state):
            pass

    _, spec = resolve_model("shapes-yolo")
    metrics, kept = PipelineMetrics(), Kept()
    sink = EventSink(spec, EventSettings(snapshots=False), [Broken(), kept],
                     fps_of=lambda _: 10.0, end_s_of=lambda _: 1.0, metrics=metrics)
    for k in range(3):
        r = result(k, [[10 * k, 0, 10 * k + 20, 20]], [1])
        r.events.append({"type": "line_cross", "line": "door", "direction": "in",
                         "track_id": 1, "class": "box"})
        sink.write(r)
    assert [e["type"] for e in kept.events][:2] == ["new", "line_cross"]
    assert metrics.events[("broken", "dropped")] == len(kept.events)


def test_media_are_never_served_through_a_link(tmp_path):
    """Issue 40, item 2: a link placed in the media folder (to a file, or a folder) made the
    media routes answer with a file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("not media")
    store = MediaStore(tmp_path / "media")
    kept, linked, in_linked_folder = "a" * 32, "b" * 32, "c" * 32
    (store.folder("cam") / f"{kept}.jpg").write_bytes(b"jpeg")
    (store.folder("cam") / f"{linked}.jpg").symlink_to(secret)
    (outside / f"{in_linked_folder}.jpg").write_bytes(b"jpeg")
    (store.root / "elsewhere").symlink_to(outside, target_is_directory=True)
    assert store.find(kept, "snapshot") == store.root / "cam" / f"{kept}.jpg"
    assert store.find(linked, "snapshot") is None
    assert store.find(in_linked_folder, "snapshot") is None


def test_a_recorded_input_is_placed_by_when_its_camera_sent_the_key_frame(gop_clip):
    """A camera's main stream placed on its sub-stream's timeline by the moment the camera
    sent its first key frame (the source's clock), not when the recording thread read it:
    on a busy machine that thread reads late, and every clip would be that much off."""
    from pipelines.decode.timeline import StreamTimeline
    from pipelines.events.record import RecordInput

    t0 = time.monotonic() - 0.3  # both inputs began 0.3 s ago; the reader is that late

    class SentAtT0:
        stream_id, epoch = "yard", 0

        def __init__(self) -> None:
            self.container = av.open(str(gop_clip))
            self.video = self.container.streams.video[0]

        def packets(self):
            yield from self.container.demux(self.video)

        def arrival_time(self, pts):
            return None if pts is None else t0 + pts

        def close(self) -> None:
            self.container.close()

    detected = StreamTimeline(25)
    assert detected.now(t0) is None  # before its first frame: nothing is placed
    detected.at(0.0, 0, t0)  # the detected input's first frame, sent with the key frame
    ring = PacketRing(60, 10 ** 8)
    recorder = RecordInput(SentAtT0(), ring, detected.now)
    recorder.start()
    recorder._thread.join(timeout=10)
    recorder.close()
    assert ring.newest == pytest.approx(3.96, abs=1e-3)  # 0.0 to 3.96, as sent
    assert ring.cut(0.0, 0.5).start == pytest.approx(0.0, abs=1e-3)
