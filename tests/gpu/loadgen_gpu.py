"""LoadGen's four scenarios, short, against vidpipe's detector on the lent GPU (issue 39):
TensorRT where the machine has it, the torch runtime otherwise. One line a scenario, LoadGen's
logs under OUT/loadgen. Run by device_check.sh; unverified until it has run on a GPU."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.bench.loadgen import harness  # noqa: E402
from app.bench.loadgen.library import SampleLibrary  # noqa: E402
from app.bench.loadgen.systems import EngineSUT  # noqa: E402
from models.tracking_data import make_tracking_clip  # noqa: E402
from models.zoo import resolve_model  # noqa: E402
from pipelines.options import PipelineOptions  # noqa: E402


def main() -> int:
    out = Path(os.environ.get("OUT") or "/tmp") / "loadgen"
    out.mkdir(parents=True, exist_ok=True)
    runtime = "tensorrt" if importlib.util.find_spec("tensorrt") else "torch"
    clip = make_tracking_clip(out / "clip.mp4", clip=0, frames=64, occluded=False)
    path, spec = resolve_model("shapes-yolo")
    library = SampleLibrary(clip, 64)
    system = EngineSUT(path, spec, library,
                       PipelineOptions(device="cuda", runtime=runtime, allow_cpu_fallback=False))
    try:
        print(f"loadgen on {system.describe}")
        for scenario in harness.SCENARIOS:
            summary = harness.run(system, library,
                                  harness.settings(scenario, spec.name, short=True),
                                  out / scenario)
            print(f"loadgen {scenario}: {'VALID' if summary.valid else 'INVALID'} "
                  f"{summary.headline()}")
    finally:
        system.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
