"""What the GPU path's exact conversions cost against what they replaced, interleaved in one
process (docs/BENCHMARKS.md, "GPU"):

- 1080p NV12 to RGB: ``pipelines/decode/yuv.py``'s lookup tables against the same arithmetic
  computed step by step (one kernel per step), on 1 and 8 threads;
- 1080p to 640 bilinear in TorchPreprocessor: OpenCV's fixed point (``linear.py``, the
  default) against the float weight matrices it replaced, one frame and batches of 8, and end
  to end on 8 streams.

    python tests/gpu/bench_exact.py            # on a GPU (the figures were taken on an H200)
    python tests/gpu/bench_exact.py --smoke    # the code path on a CPU, tiny sizes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pipelines.preprocess.torch_cuda as torch_cuda  # noqa: E402
from models.spec import InputSpec  # noqa: E402
from pipelines.decode.yuv import UNTAGGED, YuvMatrix, nv12_to_rgb  # noqa: E402
from pipelines.frame import Frame  # noqa: E402

EXACT_RESIZE = torch_cuda.resize_linear


def nv12_step_by_step(nv12: torch.Tensor, height: int, width: int,
                      matrix: YuvMatrix = UNTAGGED) -> torch.Tensor:
    """The conversion yuv.py tabulates, one torch op per arithmetic step."""
    chroma_h, chroma_w = (height + 1) // 2, (width + 1) // 2
    luma = (nv12[:height, :width].to(torch.int32) * 8 - matrix.y_offset) * matrix.y_gain >> 16
    uv = nv12[height:height + chroma_h, :chroma_w * 2].to(torch.int32).reshape(
        chroma_h, chroma_w, 2) * 8 - (128 << 3)
    u, v = uv[..., 0], uv[..., 1]
    chroma = torch.stack([v * matrix.v_to_r >> 16,
                          (u * matrix.u_to_g >> 16) + (v * matrix.v_to_g >> 16),
                          u * matrix.u_to_b >> 16], dim=-1)
    chroma = chroma.repeat_interleave(2, 0)[:height].repeat_interleave(2, 1)[:, :width]
    return (luma[..., None] + chroma).clamp_(0, 255).to(torch.uint8)


def float_resize(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """The bilinear resize TorchPreprocessor had: OpenCV's float weights as two products."""
    pixels = image.permute(2, 0, 1).float()
    wy = torch_cuda.resize_weights(image.shape[0], height, "bilinear", image.device)
    wx = torch_cuda.resize_weights(image.shape[1], width, "bilinear", image.device)
    resized = torch.matmul(torch.matmul(wy, pixels), wx.T).round_().clamp_(0, 255)
    return resized.to(torch.uint8).permute(1, 2, 0)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def conversion(device: torch.device, size: tuple[int, int], count: int) -> None:
    width, height = size
    nv12 = torch.randint(0, 256, (height * 3 // 2, width), dtype=torch.uint8, device=device)
    if not torch.equal(nv12_step_by_step(nv12, height, width), nv12_to_rgb(nv12, height, width)):
        raise SystemExit("the two conversions differ")
    for name, convert in (("step by step", nv12_step_by_step), ("tables", nv12_to_rgb)):
        for threads in (1, 8):
            def work(convert=convert) -> None:  # type: ignore[no-untyped-def]
                stream = torch.cuda.Stream(device) if device.type == "cuda" else None
                with torch.cuda.stream(stream) if stream is not None else nullcontext():
                    for _ in range(count):
                        convert(nv12, height, width)
                synchronize(device)

            work()
            start = time.perf_counter()
            workers = [threading.Thread(target=work) for _ in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            rate = threads * count / (time.perf_counter() - start)
            print(f"NV12 to RGB {width}x{height}, {name}, {threads} threads: {rate:.0f} pictures/s")


def preprocessing(device: torch.device, size: tuple[int, int], count: int) -> None:
    width, height = size
    spec = InputSpec(width=640, height=640)
    images = [torch.randint(0, 256, (height, width, 3), dtype=torch.uint8, device=device)
              for _ in range(8)]
    pre = torch_cuda.TorchPreprocessor(spec, device)

    def per_frame_ms(batch: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for k in range(count):
            pre.prepare_many([Frame("s", i, None, 0.0, images[(k + i) % 8])
                              for i in range(batch)])
        synchronize(device)
        return (time.perf_counter() - start) / (count * batch) * 1e3

    try:
        for batch in (1, 8):
            times: dict[str, list[float]] = {"exact": [], "float": []}
            for _ in range(3):
                for name, resize in (("exact", EXACT_RESIZE), ("float", float_resize)):
                    torch_cuda.resize_linear = resize
                    per_frame_ms(batch)  # warm-up
                    times[name].append(per_frame_ms(batch))
            print(f"preprocess {width}x{height} to 640, batch {batch}: " + ", ".join(
                f"{name} {statistics.median(v):.3f} ms a frame (runs "
                f"{', '.join(f'{x:.3f}' for x in v)})" for name, v in times.items()))
    finally:
        torch_cuda.resize_linear = EXACT_RESIZE


def end_to_end(device: torch.device, size: tuple[int, int], frames: int) -> None:
    from prometheus_client import CollectorRegistry

    from models.backends.torch import TorchBackend
    from pipelines.backends.gpu import decoder_factory
    from pipelines.gpu_metrics import BackendReport
    from pipelines.options import PipelineOptions
    from pipelines.synthetic.rectangles import make_test_clip
    from tests.gpu.agreement import run_gpu_pipeline
    from tests.gpu.bench_gpu import e2e_model

    clip = make_test_clip(Path("/tmp/vidpipe-bench-exact.mp4"), frames=frames, size=size, seed=3)
    model, label, spec = e2e_model()
    fps: dict[str, list[float]] = {"exact": [], "float": []}
    try:
        for _ in range(3):
            for name, resize in (("exact", EXACT_RESIZE), ("float", float_resize)):
                torch_cuda.resize_linear = resize
                backend = TorchBackend(model, input_shape=(3, 640, 640), device=str(device),
                                       precision="fp16", max_batch=8)
                found, _, wall = run_gpu_pipeline(
                    [clip] * 8, spec, backend,
                    decoder_factory(device, PipelineOptions(),
                                    BackendReport(CollectorRegistry()), 1),
                    lambda: torch_cuda.TorchPreprocessor(spec.input, device), device, batch_size=8)
                backend.close()
                fps[name].append(len(found) / wall)
    finally:
        torch_cuda.resize_linear = EXACT_RESIZE
    print(f"end to end, 8 streams {size[0]}x{size[1]}, {label}: " + ", ".join(
        f"{name} {statistics.median(v):.0f} fps (runs {', '.join(f'{x:.0f}' for x in v)})"
        for name, v in fps.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, on the CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        device, size, count, frames = torch.device("cpu"), (64, 48), 3, 4
    else:
        device, size, count, frames = torch.device("cuda:0"), (1920, 1080), 300, 120
    conversion(device, size, count)
    preprocessing(device, size, count // 3)
    if not args.smoke:
        end_to_end(device, size, frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
