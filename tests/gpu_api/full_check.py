"""``make gpu-api``: the real GPU wheels' API, read in an environment of their own, written to
``tests/gpu_api/manifest.json``, and vidpipe's code checked against it.

1. a virtual environment at ``build/gpu-api/venv`` with the pinned wheels (``PACKAGES``;
   downloaded once into ``build/gpu-api/wheels``, about 200 MB, mostly CV-CUDA);
2. stand-in driver libraries at ``build/gpu-api/standins`` (``standins.py``);
3. ``introspect.py`` in that environment, over the stand-ins: the manifest;
4. ``conformance.py``: every use in the code against it (exit 1 on a problem).

``make test`` checks the code against the committed manifest (``test_gpu_api.py``), which
needs none of this; run ``make gpu-api`` when the pins or the GPU code's uses change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.gpu_api import standins
from tests.gpu_api.conformance import MANIFEST, ROOT, report

# The versions the GPU image installs (docker/Dockerfile), one place for the check.
PACKAGES = ("tensorrt-cu12==11.4.0.106", "tensorrt-cu12-bindings==11.4.0.106",
            "pynvvideocodec==2.2.4", "cvcuda-cu12==0.19.0", "nvidia-ml-py==13.615.71",
            "numpy==2.4.6")
MODULES = ("tensorrt", "PyNvVideoCodec", "pynvml", "cvcuda")
WORK = ROOT / "build" / "gpu-api"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def environment() -> Path:
    """The conformance environment with the pinned wheels (made once; wheels cached)."""
    venv, wheels = WORK / "venv", WORK / "wheels"
    python = _python(venv)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), "-m", "pip", "download", "--quiet", "--no-deps", "-d",
                    str(wheels), *PACKAGES], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--find-links", str(wheels), *PACKAGES], check=True)
    return venv


def main() -> int:
    began = time.monotonic()
    venv = environment()
    site = next((venv / "lib").glob("python3*/site-packages"))
    built = standins.build(site, WORK / "standins")
    print("stand-ins: " + ", ".join(f"{n} ({k} symbols)" for n, k in sorted(built.items())))
    surface = WORK / "surface.json"
    env = {**os.environ, "LD_LIBRARY_PATH": str(WORK / "standins")}
    subprocess.run([str(_python(venv)), str(Path(__file__).with_name("introspect.py")),
                    str(surface), *MODULES], check=True, env=env, cwd=WORK)
    libraries = json.loads(surface.read_text())
    lines = ",\n".join(f'  {json.dumps(name)}: ' + json.dumps(
        {k: v for k, v in entry.items() if k != "names"} | {"names": "__NAMES__"})
        .replace('"__NAMES__"', "{\n" + ",\n".join(
            f"   {json.dumps(n)}: {json.dumps(e, sort_keys=True)}"
            for n, e in sorted(entry["names"].items())) + "}")
        for name, entry in sorted(libraries.items()))
    MANIFEST.write_text('{"generated_by": "make gpu-api", "packages": '
                        f'{json.dumps(list(PACKAGES))},\n "libraries": {{\n{lines}}}}}\n')
    print(f"wrote {MANIFEST.relative_to(ROOT)} in {time.monotonic() - began:.0f} s")
    return report(MANIFEST)


if __name__ == "__main__":
    sys.exit(main())
