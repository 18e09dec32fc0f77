"""The service's result sinks: rotated JSON lines that are never half on disk, and the live
results feed that drops a slow reader's oldest lines instead of waiting for it."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from pipelines.frame import Detections, Frame, Result
from pipelines.sinks.broadcast import ResultBroadcast
from pipelines.sinks.rotating import RotatingJsonlSink, result_files
from tests.support.fakes import FAKE_SPEC


def _result(index: int, stream: str = "cam") -> Result:
    boxes = Detections(np.array([[1.0, 2.0, 30.0, 40.0]], np.float32),
                       np.array([0.9], np.float32), np.array([0], np.int32))
    return Result(Frame(stream, index, index / 30, 0.0, None), boxes)


def _lines(directory) -> list[dict]:
    return [json.loads(line) for path in result_files(directory)
            for line in path.read_text().splitlines()]


def test_rotation_keeps_every_line_once_in_order_in_numbered_files(tmp_path):
    sink = RotatingJsonlSink(tmp_path / "cam", FAKE_SPEC, rotate_bytes=1000)
    for i in range(100):
        sink.write(_result(i))
    sink.close()
    files = result_files(tmp_path / "cam")
    assert [p.name for p in files[:3]] == ["detections.1.jsonl", "detections.2.jsonl",
                                          "detections.3.jsonl"]
    assert files[-1].name == "detections.jsonl" and sink.rotations == len(files) - 1 >= 5
    assert all(p.stat().st_size <= 1000 for p in files)
    assert [r["frame"] for r in _lines(tmp_path / "cam")] == list(range(100))
    assert _lines(tmp_path / "cam")[0]["detections"][0]["box"] == [1.0, 2.0, 30.0, 40.0]


def test_a_restart_appends_goes_on_numbering_and_cuts_a_half_line(tmp_path):
    with RotatingJsonlSink(tmp_path, FAKE_SPEC, rotate_bytes=800) as sink:
        for i in range(20):
            sink.write(_result(i))
    current = tmp_path / "detections.jsonl"
    with current.open("a") as f:  # a writer killed mid-line
        f.write('{"stream":"cam","frame":20,"pts"')
    with RotatingJsonlSink(tmp_path, FAKE_SPEC, rotate_bytes=800) as sink:
        for i in range(20, 40):
            sink.write(_result(i))
    assert [r["frame"] for r in _lines(tmp_path)] == list(range(40))
    numbers = [int(p.name.split(".")[1]) for p in result_files(tmp_path)[:-1]]
    assert numbers == list(range(1, len(numbers) + 1))


def test_a_short_write_leaves_no_half_line(tmp_path, monkeypatch):
    import pipelines.sinks.rotating as rotating

    sink = RotatingJsonlSink(tmp_path, FAKE_SPEC, rotate_bytes=10**6)
    sink.write(_result(0))
    real_write = rotating.os.write
    monkeypatch.setattr(rotating.os, "write", lambda fd, data: real_write(fd, data[:7]))
    try:
        sink.write(_result(1))
    except OSError as e:
        assert "disk full" in str(e)
    else:
        raise AssertionError("a short write must raise")
    monkeypatch.setattr(rotating.os, "write", real_write)
    sink.write(_result(2))
    sink.close()
    assert [r["frame"] for r in _lines(tmp_path)] == [0, 2]


def test_a_slow_reader_loses_its_oldest_lines_and_is_told_how_many():
    async def main() -> tuple[list, list]:
        live = ResultBroadcast(FAKE_SPEC, backlog=4)
        live.write(_result(0))  # nobody reads yet: nothing kept
        reader = live.subscribe()
        for i in range(1, 11):  # from the sink's thread, as in a pipeline
            await asyncio.to_thread(live.write, _result(i))
        await asyncio.sleep(0)
        got = [await reader.next(1.0) for _ in range(4)]
        live.close()
        return got, [await reader.next(1.0)]

    got, end = asyncio.run(main())
    assert [(json.loads(line)["frame"], lost) for line, lost in got] == [(7, 6), (8, 0), (9, 0),
                                                                       (10, 0)]
    assert end == [None]


def test_a_calls_lines_at_once_are_the_same_files_in_one_write_per_file(tmp_path, monkeypatch):
    import pipelines.sinks.rotating as rotating

    one = RotatingJsonlSink(tmp_path / "one", FAKE_SPEC, rotate_bytes=1000)
    for i in range(100):
        one.write(_result(i))
    one.close()
    writes = []
    real_write = rotating.os.write
    monkeypatch.setattr(rotating.os, "write",
                        lambda fd, data: writes.append(data) or real_write(fd, data))
    many = RotatingJsonlSink(tmp_path / "many", FAKE_SPEC, rotate_bytes=1000)
    for start in range(0, 100, 16):
        many.write_all([_result(i) for i in range(start, min(start + 16, 100))])
    many.close()
    ones, manys = result_files(tmp_path / "one"), result_files(tmp_path / "many")
    assert [p.name for p in ones] == [p.name for p in manys]
    assert [p.read_bytes() for p in ones] == [p.read_bytes() for p in manys]
    assert many.lines == 100 and many.rotations == one.rotations
    # a call's lines in one write, or one more for a rotation among them (not at its end)
    assert 7 <= len(writes) <= 7 + many.rotations < 100
    assert all(w.endswith(b"\n") for w in writes)


def test_a_calls_lines_reach_a_reader_in_order_with_one_wake_up():
    async def main() -> list:
        live = ResultBroadcast(FAKE_SPEC, backlog=64)
        reader = live.subscribe()
        loop = asyncio.get_running_loop()
        scheduled = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: scheduled.append(a) or real(*a)  # type: ignore
        await asyncio.to_thread(live.write_all, [_result(i) for i in range(5)])
        await asyncio.sleep(0)
        got = [await reader.next(1.0) for _ in range(5)]
        assert [a[0] for a in scheduled].count(live._publish) == 1
        return got

    assert [json.loads(line)["frame"] for line, _ in asyncio.run(main())] == list(range(5))
