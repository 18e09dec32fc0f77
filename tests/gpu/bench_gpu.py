"""A short GPU benchmark that prints ONE table (run by tests/gpu/device_check.sh).

Rows: the libraries found; GPU-vs-CPU detection agreement at FP32 and FP16 (RectangleDetector,
tests/gpu/agreement.py, 1280x720 clip); NVDEC decode fps for a 1080p H.264 clip on 1 and 8
streams; end-to-end fps on 1, 8 and 32 streams of that clip with the torch-CUDA backend
(NVDEC or FFmpeg decode, torch preprocessing, ShapesYOLO 640x640 FP16 with CUDA graphs, GPU
NMS); GPU and NVDEC utilisation (NVML) during those runs; CV-CUDA and TensorRT, or "not
installed". Every part has a share of ``--budget-s`` and is cut short, and says so, when its
time is up. ``--out DIR`` also writes the table as bench_gpu.json.

    python3 tests/gpu/bench_gpu.py --budget-s 100 [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pipelines.cuda import library_available  # noqa: E402
from tests.gpu.bench_parts import NvmlWatch, Plan, Table  # noqa: E402


def libraries(table: Table) -> None:
    import importlib

    name = torch.cuda.get_device_name(0)
    table.add("GPU", name, f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    for module, label in (("PyNvVideoCodec", "PyNvVideoCodec (NVDEC)"), ("cvcuda", "CV-CUDA"),
                          ("tensorrt", "TensorRT"), ("pynvml", "nvidia-ml-py (NVML)")):
        problem = unusable(module)
        version = "" if problem else getattr(importlib.import_module(module), "__version__", "")
        table.add(label, problem or f"installed {version}".strip())


def agreement_rows(table: Table, media: Path, plan: Plan) -> None:
    from prometheus_client import CollectorRegistry

    from models.backends.torch import TorchBackend
    from pipelines.backends.gpu import decoder_factory
    from pipelines.gpu_metrics import BackendReport
    from pipelines.options import PipelineOptions
    from pipelines.preprocess.torch_cuda import TorchPreprocessor
    from pipelines.synthetic.rectangles import make_test_clip
    from tests.gpu.agreement import (
        agreement,
        run_cpu_pipeline,
        run_gpu_pipeline,
        write_rectangle_model,
    )

    clip = make_test_clip(media / "agree.mp4", frames=plan.agree_frames, size=plan.agree_clip,
                          seed=11)
    path, spec, model = write_rectangle_model(media / "agree", plan.agree_clip, (640, 640))
    cpu = run_cpu_pipeline(clip, path, spec)
    device = torch.device(plan.device)
    for precision in ("fp32", "fp16"):
        report = BackendReport(CollectorRegistry())
        backend = TorchBackend(model, input_shape=(3, 640, 640), device=plan.device,
                               precision=precision, max_batch=8)
        found, _, _ = run_gpu_pipeline(
            [clip], spec, backend, decoder_factory(device, PipelineOptions(), report, 1),
            lambda: TorchPreprocessor(spec.input, device), device, batch_size=8)
        backend.close()
        there, back = agreement(cpu, found), agreement(found, cpu)
        table.add(f"agreement GPU vs CPU, {precision}",
                  f"{there.ratio:.2%} / {back.ratio:.2%} matched, max score diff "
                  f"{max(there.max_score_diff, back.max_score_diff):.4f}",
                  f"IoU>=0.9, {there.boxes} CPU boxes, {plan.agree_frames} frames "
                  f"{plan.agree_clip[0]}x{plan.agree_clip[1]}, decode "
                  f"{report.choices.get('decode', ('?',))[0]}")


def unusable(module: str) -> str | None:
    """Why ``module`` cannot be used here ("not installed", "cannot load: ..."), or None."""
    import importlib

    if not library_available(module):
        return "not installed"
    try:
        importlib.import_module(module)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"cannot load: {first[:100]}"
    return None


def nvdec_rows(table: Table, clip: Path, plan: Plan) -> None:
    problem = "not on the CPU" if plan.device == "cpu" else unusable("PyNvVideoCodec")
    if problem is not None:
        table.add("NVDEC decode fps 1080p H.264", problem, "(PyNvVideoCodec)")
        return
    from pipelines.decode.nvdec import NvdecDecoder
    from pipelines.sources.file import FileSource

    def decode_all(_: int) -> int:
        count = 0
        with FileSource(clip, "s") as source:
            decoder = NvdecDecoder(source.video, "cuda:0")
            for packet in source.packets():
                count += len(decoder.decode(packet))
            decoder.close()
        return count

    decode_all(0)  # warm-up: driver and decoder initialisation
    for streams in (1, 8):
        with NvmlWatch() as watch, ThreadPoolExecutor(streams) as pool:
            start = time.perf_counter()
            total = sum(pool.map(decode_all, range(streams)))
            wall = time.perf_counter() - start
        table.add(f"NVDEC decode fps, {streams} stream{'s' * (streams > 1)}",
                  f"{total / wall:.0f} fps", f"{total} frames {plan.clip[0]}x{plan.clip[1]} "
                  "H.264 to RGB on the "
                  f"GPU; {watch.describe()}")


def e2e_rows(table: Table, clip: Path, plan: Plan) -> None:
    from prometheus_client import CollectorRegistry

    from models.backends.torch import TorchBackend
    from pipelines.backends.gpu import decoder_factory
    from pipelines.gpu_metrics import BackendReport
    from pipelines.metrics import PipelineMetrics
    from pipelines.options import PipelineOptions
    from pipelines.preprocess.torch_cuda import TorchPreprocessor
    from tests.gpu.agreement import run_gpu_pipeline

    model, label, spec = e2e_model()
    device = torch.device(plan.device)
    for streams, per_stream in plan.runs:
        if table.left() < 20:
            table.add(f"end-to-end fps, {streams} streams", "skipped", "(time budget)")
            continue
        batch = min(32, max(4, streams))
        backend = TorchBackend(model, input_shape=(3, 640, 640), device=plan.device,
                               precision="fp16", max_batch=batch)
        registry = CollectorRegistry()
        report = BackendReport(registry)
        with NvmlWatch() as watch:
            found, metrics, wall = run_gpu_pipeline(
                [clip] * streams, spec, backend,
                decoder_factory(device, PipelineOptions(), report, 1),
                lambda: TorchPreprocessor(spec.input, device), device, batch_size=batch,
                frames=per_stream, metrics=PipelineMetrics(registry))
        backend.close()
        busiest = max(metrics.stage_summaries(wall), key=lambda s: s.busy)
        table.add(f"end-to-end fps, {streams} stream{'s' * (streams > 1)}",
                  f"{len(found) / wall:.0f} fps",
                  f"{len(found)} frames {plan.clip[1]}p, {label}, batch {batch}, decode "
                  f"{report.choices.get('decode', ('?',))[0]}; busiest {busiest.stage} "
                  f"{busiest.busy:.0%}; {watch.describe()}")


def e2e_model() -> tuple[torch.nn.Module, str, Any]:
    """ShapesYOLO (80 classes, random weights: real convolution cost) or, where the detector
    module is not there, the RectangleDetector."""
    from tests.gpu.agreement import RectangleDetector, rectangle_spec

    try:
        from models.detector import DetectorConfig, build_detector

        model = build_detector(DetectorConfig(num_classes=80, input_size=(640, 640))).eval()
        spec = rectangle_spec((640, 640)).model_copy(update={
            "classes": [f"class{i}" for i in range(80)]})
        return model, "ShapesYOLO 640 fp16 CUDA graphs", spec
    except Exception:
        return (RectangleDetector((640, 640), (320, 180)).eval(),
                "RectangleDetector 640 fp16 CUDA graphs", rectangle_spec((640, 640)))


def optional_rows(table: Table, plan: Plan) -> None:
    from models.spec import InputSpec
    from pipelines.frame import Frame

    problem = "not on the CPU" if plan.device == "cpu" else unusable("cvcuda")
    if problem is not None:
        table.add("CV-CUDA preprocessing", problem)
    else:
        from pipelines.preprocess.cvcuda import CvCudaPreprocessor
        from pipelines.preprocess.torch_cuda import TorchPreprocessor

        spec = InputSpec(width=640, height=640)
        image = torch.randint(0, 256, (1080, 1920, 3), dtype=torch.uint8, device="cuda")
        for name, pre in (("CV-CUDA", CvCudaPreprocessor(spec, "cuda:0")),
                          ("torch", TorchPreprocessor(spec, "cuda:0"))):
            frames = [Frame("s", i, None, 0.0, image) for i in range(32)]
            pre.prepare_many(frames)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(5):
                pre.prepare_many(frames)
            torch.cuda.synchronize()
            table.add(f"{name} preprocessing fps", f"{160 / (time.perf_counter() - start):.0f}",
                      "1080p to 640x640 NCHW float, batches of 32")
    problem = unusable("tensorrt")
    table.add("TensorRT inference", problem or "installed: checked by the GPU tests",
              "(engine speed: vidpipe model optimize)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny runs on the CPU, to check this script without a GPU")
    args = parser.parse_args(argv)
    plan = Plan.smoke() if args.smoke else Plan()
    table = Table(args.budget_s)
    if plan.device != "cpu" and not torch.cuda.is_available():
        table.add("GPU", "none", "torch finds no CUDA device")
        print(table.render())
        return 1
    from pipelines.synthetic.rectangles import make_test_clip

    with tempfile.TemporaryDirectory(prefix="vidpipe-bench-") as tmp:
        media = Path(tmp)
        if plan.device != "cpu":
            libraries(table)
        table.attempt("agreement", 25, lambda: agreement_rows(table, media, plan))
        clip: list[Path] = []
        table.attempt("test clip", 20, lambda: clip.append(make_test_clip(
            media / "clip.mp4", frames=plan.clip_frames, size=plan.clip, seed=2)))
        if clip:
            table.attempt("NVDEC decode", 15, lambda: nvdec_rows(table, clip[0], plan))
            table.attempt("end-to-end", 20, lambda: e2e_rows(table, clip[0], plan))
        table.attempt("optional libraries", 5, lambda: optional_rows(table, plan))
    print(table.render(), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_gpu.json").write_text(json.dumps(
            [dict(zip(("measure", "value", "how"), r, strict=True)) for r in table.rows],
            indent=1))
    return 0 if not any(r[1] == "FAILED" for r in table.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
