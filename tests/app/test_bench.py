"""`vidpipe bench` and `vidpipe profile` run, measure what they say, and report it."""

import json

import pytest

from tests.support.cli import vidpipe


@pytest.mark.slow
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
    assert hand["fps_each_rep"] == [hand["fps"]] and ours["fps_each_rep"] == [ours["fps"]]
    assert ours["alone"]["infer_workers"] == ours["threads"]["infer_workers"]
    assert "alone" not in hand and ours["alone"]["infer_threads"] == ours["threads"]["infer"]
    slowest = min(ours["alone"]["prepare_fps"], ours["alone"]["infer_fps"])
    assert ours["efficiency"] == ours["fps"] / slowest  # one rep: its own ratio
    assert ours["efficiency_each_rep"] == [ours["efficiency"]]
    alone = ours["alone"]
    assert alone["prepare_cpu_ms"] > 0 and alone["infer_cpu_ms"] > 0
    cores = report["machine"]["cores"]
    cpu_ms = alone["prepare_cpu_ms"] + alone["infer_cpu_ms"]
    assert ours["cpu_ceiling_fps"] == cores * 1e3 / cpu_ms
    assert ours["efficiency_vs_ceiling"] == ours["fps"] / min(slowest, ours["cpu_ceiling_fps"])
    assert [r["streams"] for r in report["scaling"]] == [1, 2]
    assert report["scaling"][1]["frames"] == 60
    live = report["live"]
    # 2 s of a 30 fps camera: every frame it sent processed or dropped with a cause (a busy
    # machine drops more, drop_oldest is for that), and not read faster than it films
    received = live["frames"] + sum(live["drops"].values())
    assert 50 <= received <= 70, live["drops"]
    assert live["frames"] >= 20 and set(live["drops"]) <= {"dropped_full", "dropped_stale"}
    assert live["windows"] and all(w["p99_ms"] > 0 for w in live["windows"])
    assert "Hand loop vs vidpipe" in output and "Scaling" in output and "Live" in output
    speed = report["machine"]["core_speed_all_busy"]
    assert len(speed["turns_alone"]) == 2 and len(speed["turns_together"]) == speed["cores"]
    assert min(speed["turns_alone"] + speed["turns_together"]) > 0
    together, alone = speed["turns_together"], speed["turns_alone"]
    assert speed["ratio"] == (sum(together) / len(together)) / (sum(alone) / len(alone))
    assert f"each ran a fixed loop at {speed['ratio']:.2f}x" in " ".join(output.split())


def test_profile_names_the_bottleneck_and_advises(small_clip):
    code, output = vidpipe("profile", small_clip, "--seconds", 1, "--decode-threads", 1)
    assert code == 0, output
    assert "ceiling" in output and "efficiency" in output
    assert "is the bottleneck" in output


def test_bench_refuses_bad_stream_counts(small_clip):
    code, output = vidpipe("bench", "--source", small_clip, "--streams", "0,x")
    assert code == 2
    assert "1,2,4,8" in output


def test_stages_alone_decode_the_clip_and_infer_as_many_frames(small_clip):
    from pathlib import Path

    from app.bench.alone import measure_alone
    from models.zoo import resolve_model

    path, spec = resolve_model("shapes-yolo")
    alone = measure_alone(Path(small_clip), path, spec, decode_threads=1, infer_threads=1,
                          batch_size=3, frame_limit=7)
    assert alone.prepare_fps > 0 and alone.infer_fps > 0
    assert alone.slowest_fps == min(alone.prepare_fps, alone.infer_fps)
    assert alone.as_dict()["batch_size"] == 3


def test_decode_advice_offers_more_threads_only_while_a_core_is_left():
    from app.bench.profile import CORES, advice
    from pipelines.options import PipelineOptions
    from pipelines.threads import ThreadPlan

    stages = [{"stage": "decode", "busy": 0.9}, {"stage": "infer", "busy": 0.5}]
    every_core = advice(stages, stages[0], 0.5, PipelineOptions(), ThreadPlan(1, CORES, "x"))
    assert "decode is the bottleneck" in every_core[0]
    assert "--decode-threads" not in " ".join(every_core)
    if CORES > 1:
        one = advice(stages, stages[0], 0.5, PipelineOptions(), ThreadPlan(1, 1, "x"))
        assert "--decode-threads 2; now 1" in " ".join(one)


def test_efficiency_pairs_each_rep_with_the_stages_alone_measured_after_it():
    # the machine drifts between reps: each rep is compared with its own yardstick, and the
    # median of those ratios is the efficiency (here not the ratio of the two medians, 0.83)
    import numpy as np

    from app.bench.alone import StagesAlone
    from app.bench.compare import _compare_rows
    from app.bench.measure import Measurement

    def run(name, fps):
        return Measurement(name, int(fps), 1.0, 0.5, np.zeros(0))

    def stages(prepare_fps):
        return StagesAlone(prepare_fps, 1000.0, 1, 1, 4, 5.0, 1.0)

    label, hand = "m", "hand loop, 1 thread"
    runs = {(label, hand): [run(hand, 50), run(hand, 60), run(hand, 55)],
            (label, "vidpipe"): [run("vidpipe", 95), run("vidpipe", 150), run("vidpipe", 100)]}
    alone = {label: [stages(100), stages(160), stages(120)]}
    ours = _compare_rows({label: (None, None)}, runs, alone)[1]
    assert ours["efficiency_each_rep"] == [95 / 100, 150 / 160, 100 / 120]
    assert ours["efficiency"] == 150 / 160
    assert ours["alone"]["prepare_fps"] == 120  # the yardstick shown is still the median


@pytest.mark.slow
def test_bench_service_runs_each_stream_count_in_its_own_process(small_clip, tmp_path):
    code, output = vidpipe("bench", "--service", "1,2", "--seconds", 1, "--source", small_clip,
                           "--model", "shapes-yolo", "--detect-fps", 5, "--out", tmp_path)
    assert code == 0, output
    rows = json.loads((tmp_path / "bench.json").read_text())["service"]
    assert [r["streams"] for r in rows] == [1, 2]
    assert all(r["fps_total"] > 0 and r["model_loads"] == 1 and r["rss_mb"] > 0 for r in rows)
    assert all(r["detect_fps"] == 5 for r in rows)


@pytest.mark.slow
def test_bench_against_a_commit_runs_both_codes_default_pipelines(small_clip, tmp_path):
    code, output = vidpipe("bench", "--against", "HEAD", "--reps", 1, "--frames", 8,
                           "--source", small_clip, "--out", tmp_path)
    assert code == 0, output
    (row,) = json.loads((tmp_path / "bench.json").read_text())["against"]
    assert row["variant"] == "fp32" and row["fps_this"] > 0 and row["fps_against"] > 0
    assert [r["frames"] for r in row["runs"]["this"]] == [8]
    assert [r["frames"] for r in row["runs"][row["against"]]] == [8]


def test_bench_against_what_is_not_a_commit_is_one_line(small_clip, tmp_path):
    code, output = vidpipe("bench", "--against", "no-such-rev", "--source", small_clip,
                           "--out", tmp_path)
    assert code == 2 and "not a commit" in output


@pytest.mark.slow
def test_bench_startup_times_whole_processes_and_the_services_memory(small_clip, tmp_path):
    code, output = vidpipe("bench", "--startup", "--model", "shapes-yolo", "--source",
                           small_clip, "--reps", 1, "--seconds", 2, "--out", tmp_path)
    assert code == 0, output
    report = json.loads((tmp_path / "bench.json").read_text())
    (run,) = report["runs"]
    assert 0 < run["help_s"] < run["first"]["wall_s"]
    for kind in ("first", "repeat"):
        assert run[kind]["frames"] == 60  # every frame of the clip, in a process of its own
        assert 0 < run[kind]["first_result_s"] < run[kind]["wall_s"]
    assert not run["first"]["cached"] and run["repeat"]["cached"]  # the plan, kept and reused
    memory = report["service_rss_mb"]["this"]
    assert 0 < memory["idle"] < memory["one_stream"]
