#!/usr/bin/env bash
# The GPU check, prepared to run in ONE call on a lent GPU machine (docs/GPU.md), under 6 min:
#   1. puts the carried Python packages on PYTHONPATH (the machine cannot download anything),
#   2. runs the GPU tests with REQUIRE_GPU=1 (a skipped GPU test fails instead): the one
#      engine's stages on the GPU (build_pipeline, DeviceRuntime's two slots), the service's
#      shared detector serving four streams, NVML found by UUID, CV-CUDA and TensorRT where
#      they are (TensorRT 11's strongly typed engines: tests/gpu/test_engine_gpu.py),
#   3. runs tests/gpu/bench_gpu.py, which prints ONE table,
#   4. runs LoadGen's four scenarios, short, on the engine (tests/gpu/loadgen_gpu.py).
# What the libraries' APIs are is checked without a GPU (tests/gpu_api, make gpu-api).
#
# The machine's python3 has torch (CUDA), numpy, OpenCV, ONNX Runtime, scikit-image,
# prometheus-client, pytest and nvidia-ml-py, but not PyAV, pydantic or PyNvVideoCodec.
# Those travel as one compressed bundle (their wheels unpacked and pruned: ~30 MB, where the
# raw wheels, 63 MB, would not fit in the 64 MiB a call may carry next to the repository):
#
#   on a machine with network access (once; takes a few minutes):
#       echo /.whl/ >> .git/info/exclude
#       bash tests/gpu/device_check.sh pack          # writes .whl/gpu-site.tar.xz
#   then, on the lent machine (the device tool's run, with carry [".whl"]):
#       bash tests/gpu/device_check.sh
#
# Plain wheels in .whl/*.whl are installed too (pip --target), for a package added by hand.
# Environment: VIDPIPE_GPU_BUNDLE (the bundle, default .whl/gpu-site.tar.xz),
# VIDPIPE_GPU_SITE (where it is unpacked, default /tmp/vidpipe-gpu-site), PYTHON (python3),
# OUT (a folder for the logs and bench_gpu.json; the device tool sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUNDLE=${VIDPIPE_GPU_BUNDLE:-.whl/gpu-site.tar.xz}
SITE=${VIDPIPE_GPU_SITE:-/tmp/vidpipe-gpu-site}
PY=${PYTHON:-python3}
# Pins from pyproject.toml where the project pins them; the PyNvVideoCodec that was read.
PINNED_NO_DEPS=(av==18.1.0 pynvvideocodec==2.2.4 mlcommons-loadgen==6.0.17)
PINNED_WITH_DEPS=(pydantic==2.14.4)
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64)

pack() {
    local pip_python=${PACK_PYTHON:-.venv/bin/python}
    local work
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    "$pip_python" -m pip download --quiet --no-deps "${PLATFORM[@]}" -d "$work/wheels" \
        "${PINNED_NO_DEPS[@]}"
    "$pip_python" -m pip download --quiet "${PLATFORM[@]}" -d "$work/wheels" \
        "${PINNED_WITH_DEPS[@]}"
    mkdir -p "$work/site"
    for wheel in "$work"/wheels/*.whl; do
        "$pip_python" -m zipfile -e "$wheel" "$work/site"
    done
    # What the checks never load: PyNvVideoCodec's FFmpeg source tarball, samples, benchmarks.
    rm -rf "$work"/site/pynvvideocodec-*.data "$work/site/samples" "$work/site/benchmarks"
    # Wheels store a library's symlinks as copies: link them again (same bytes, one copy).
    find "$work/site" -name 'lib*.so*' -type f | sort | while read -r lib; do
        for other in "${lib%.so*}".so*; do
            if [[ "$other" != "$lib" && -f "$other" && ! -L "$other" && ${#other} -lt ${#lib} ]] \
                && cmp -s "$lib" "$other"; then
                ln -sf "$(basename "$lib")" "$other"
            fi
        done
    done
    chmod -R u+rwX,go+rX "$work/site"
    mkdir -p "$(dirname "$BUNDLE")"
    tar -C "$work/site" -cf - . | xz -T0 -6 > "$BUNDLE"
    ls -l "$BUNDLE"
    echo "carry the folder $(dirname "$BUNDLE") (device run: carry [\"$(dirname "$BUNDLE")\"])"
}

if [[ "${1:-}" == "pack" ]]; then
    pack
    exit 0
fi

started=$SECONDS
log_dir=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1

# 1. the carried packages
mkdir -p "$SITE"
if [[ -f "$BUNDLE" ]]; then
    tar -xJf "$BUNDLE" -C "$SITE"
fi
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# NVDEC needs the driver's video libraries (libnvcuvid, libnvidia-encode, which PyNvVideoCodec
# loads at import); where the driver is mounted, make sure the loader sees its folder.
for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    if [[ -d "$dir" ]]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
    fi
done
echo "driver video libraries: $( (ldconfig -p 2>/dev/null; ls /usr/local/nvidia/lib64 2>/dev/null) \
    | grep -oE 'lib(nvcuvid|nvidia-encode)\.so[.0-9]*' | sort -u | tr '\n' ' ')"
"$PY" - <<'EOF'
import importlib, torch
print(f"torch {torch.__version__} CUDA {torch.version.cuda} available={torch.cuda.is_available()}"
      + (f" {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
for name in ("av", "pydantic", "PyNvVideoCodec", "pynvml", "cvcuda", "tensorrt", "onnxruntime"):
    try:
        print(f"{name}: {getattr(importlib.import_module(name), '__version__', 'ok')}")
    except Exception as e:  # report, do not stop: the tests say what each one is needed for
        print(f"{name}: not available ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
EOF
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,utilization.decoder \
    --format=csv 2>/dev/null || true

# 2. the GPU tests (a GPU test that skips for want of CUDA fails here)
tests=0
REQUIRE_GPU=1 timeout 150 "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rfEs \
    2>&1 | tee "$log_dir/gpu_tests.log" || tests=$?

# 3. the benchmark: one table
bench=0
timeout 110 "$PY" tests/gpu/bench_gpu.py --budget-s 95 --out "$log_dir" 2> "$log_dir/bench.log" \
    || bench=$?

# 4. LoadGen's four scenarios, short, on the engine (TensorRT where it is, else torch)
loadgen=0
timeout 90 "$PY" tests/gpu/loadgen_gpu.py 2> "$log_dir/loadgen.log" || loadgen=$?

echo "device_check: GPU tests exit ${tests}, benchmark exit ${bench}, loadgen exit" \
    "${loadgen}, $((SECONDS - started)) s"
if (( tests != 0 || bench != 0 || loadgen != 0 )); then
    exit 1
fi
