"""A source's facts (size, rate, time base) are plain values read once when it opens: other
threads ask for them while the reader demuxes and after it closed the container (a clip sink
asked a file's rate once the file had ended, and FFmpeg read freed memory: the service died
of a segmentation fault)."""

import subprocess
import sys
import textwrap
from fractions import Fraction

from pipelines.sources.file import FileSource
from pipelines.sources.media import DEFAULT_FPS, picture_size
from pipelines.sources.rtsp import RtspSource

READ_AFTER_CLOSE = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from pipelines.sources.file import FileSource
    from pipelines.synthetic.rectangles import make_test_clip

    other = make_test_clip(Path(sys.argv[2]), frames=5, size=(64, 48), fps=12)
    source = FileSource(sys.argv[1])
    before = (source.size, source.fps, source.time_base, source.frame_count)
    reader = threading.Thread(target=lambda: sum(1 for _ in source.packets()))
    reader.start()
    reader.join()
    source.close()  # the reader ended: the container is freed now
    others = [FileSource(other) for _ in range(50)]  # its memory taken again
    for _ in range(2000):  # as a sink asks, from its own thread, once per event
        assert (source.size, source.fps, source.time_base, source.frame_count) == before
    print(source.describe())
""")


def test_a_closed_file_still_tells_its_size_and_rate(small_clip, tmp_path):
    # in a process of its own: reading freed memory may crash the interpreter, not fail
    # (before the facts were kept, it read a time base of 1/90000 and no frame count here)
    done = subprocess.run([sys.executable, "-c", READ_AFTER_CLOSE, str(small_clip),
                           str(tmp_path / "other.mp4")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "320x240 30.00 fps, 60 frames" in done.stdout


def test_a_file_declares_its_facts_at_open(small_clip):
    with FileSource(small_clip) as source:
        assert source.facts.width == 320 and source.facts.height == 240
        assert source.fps == 30.0 and source.frame_count == 60
        assert source.time_base == Fraction(1, 15360)
        assert picture_size(source) == (320, 240)


def test_a_camera_not_yet_connected_has_no_size_and_the_default_rate():
    source = RtspSource("rtsp://127.0.0.1:9/none", "porch")
    try:
        assert source.facts is None
        assert picture_size(source) is None
        assert source.fps == DEFAULT_FPS
    finally:
        source.close()
