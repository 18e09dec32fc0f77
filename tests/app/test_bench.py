"""`vidpipe bench` and `vidpipe profile` run, measure what they say, and report it."""

import json

from tests.app.test_cli import vidpipe


def test_bench_quick_compares_the_hand_loop_with_vidpipe_and_scales(small_clip, tmp_path):
    code, output = vidpipe("bench", "--quick", "--source", small_clip, "--frames", 30,
                           "--streams", "1,2", "--live", 2, "--out", tmp_path)
    assert code == 0, output
    report = json.loads((tmp_path / "bench.json").read_text())
    runners = [r["variant"] for r in report["compare"]]
    assert runners[-1] == "vidpipe" and runners[0].startswith("hand loop")
    hand, ours = report["compare"]
    assert hand["ratio_to_hand_loop"] == 1.0
    assert ours["ratio_to_hand_loop"] == ours["fps"] / hand["fps"]
    assert hand["frames"] == ours["frames"] == 30
    assert [r["streams"] for r in report["scaling"]] == [1, 2]
    assert report["scaling"][1]["frames"] == 60
    live = report["live"]
    assert 40 <= live["frames"] <= 70  # 2 s at 30 fps
    assert live["windows"] and all(w["p99_ms"] > 0 for w in live["windows"])
    assert "Hand loop vs vidpipe" in output and "Scaling" in output and "Live" in output


def test_profile_names_the_bottleneck_and_advises(small_clip):
    code, output = vidpipe("profile", small_clip, "--seconds", 1)
    assert code == 0, output
    assert "ceiling" in output and "efficiency" in output
    assert "is the bottleneck" in output


def test_bench_refuses_bad_stream_counts(small_clip):
    code, output = vidpipe("bench", "--source", small_clip, "--streams", "0,x")
    assert code == 2
    assert "1,2,4,8" in output
