"""TensorRT engines built from ONNX, cached by everything that makes an engine valid.

An engine is only good for the model it was built from, the GPU it was built on, the TensorRT
version that built it, the largest batch it was built for and its precision. Those five make
its ``EngineKey``; the key's digest names the file in the cache, and a JSON record beside the
engine repeats the key. ``ensure_engine`` reuses an engine only when the record matches the
key of the model and machine at hand, and rebuilds otherwise, saying why (a changed model, a
new TensorRT, another GPU): a stale engine is never reused silently. ``check_engine`` makes
the same check for an engine a user put beside a model (``model.engine``), for the pipeline.

Precisions: ``fp16`` (FP16 kernels allowed, FP32 where TensorRT finds them faster) and
``int8`` from a QDQ model (explicit quantization: the Q/DQ scales vidpipe's quantizer wrote
decide what runs in INT8; FP16 is allowed for the float remainder). ``fp32`` for reference.
Each engine has two optimization profiles (batch 1..``batch``), one per execution context
of the double-buffered TensorRT backend.

TensorRT is imported lazily: without it, building says so (``DeviceUnavailable``), and the
cache logic runs (and is tested) with the build step injected.

UNVERIFIED: no GPU with TensorRT has run this module; it follows the TensorRT 10 Python API
(``Builder``, ``OnnxParser``, ``create_optimization_profile``, ``build_serialized_network``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from models.errors import ModelError

log = logging.getLogger(__name__)

EnginePrecision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
PROFILES = 2  # one per execution context of TensorRTBackend
WORKSPACE_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class EngineKey:
    """What an engine is valid for; any change means another engine."""

    model_sha256: str
    gpu: str
    tensorrt: str
    batch: int
    precision: str

    @property
    def digest(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def differences(self, other: dict[str, Any]) -> list[str]:
        """The fields where a stored record differs from this key, as 'field a -> b'."""
        return [f"{k} {other.get(k)!r} -> {v!r}" for k, v in asdict(self).items()
                if other.get(k) != v]


@dataclass(frozen=True, slots=True)
class BuildEnvironment:
    gpu: str
    tensorrt: str


@dataclass(frozen=True, slots=True)
class EngineResult:
    path: Path
    key: EngineKey
    built: bool  # False: reused from the cache
    reason: str  # why it was built, or "cached"


Builder = Callable[[Path, str, int], bytes]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """VIDPIPE_ENGINE_CACHE, else ~/.cache/vidpipe/engines (the container mounts a volume)."""
    configured = os.environ.get("VIDPIPE_ENGINE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "vidpipe" / "engines"


def import_tensorrt() -> Any:
    from models.runtime.tensorrt import import_tensorrt as _import

    return _import()


def current_environment(device: int = 0) -> BuildEnvironment:
    """The GPU's name and TensorRT's version; DeviceUnavailable when either is missing."""
    trt = import_tensorrt()
    import torch

    from models.runtime.device import DeviceUnavailable

    if not torch.cuda.is_available():
        raise DeviceUnavailable("building a TensorRT engine needs a CUDA GPU; torch sees none")
    return BuildEnvironment(torch.cuda.get_device_name(device), str(trt.__version__))


def engine_key(model: Path, precision: str, batch: int, env: BuildEnvironment) -> EngineKey:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return EngineKey(file_sha256(model), env.gpu, env.tensorrt, batch, precision)


def record_path(engine: Path) -> Path:
    return engine.with_name(engine.name + ".json")


def ensure_engine(model: Path, precision: str, batch: int, cache: Path | None = None, *,
                  env: BuildEnvironment | None = None,
                  build: Builder | None = None) -> EngineResult:
    """The engine for ``model`` at ``precision`` and ``batch`` from the cache, built (and
    recorded) first when there is none or the one there was built for something else."""
    env = env or current_environment()
    key = engine_key(model, precision, batch, env)
    cache = cache or default_cache_dir()
    path = cache / f"{model.stem}-{precision}-b{batch}-{key.digest}.engine"
    reason = _staleness(path, key)
    if reason is None:
        log.info("engine %s: cached, matches the model and this machine", path.name)
        return EngineResult(path, key, False, "cached")
    log.info("engine %s: building (%s)", path.name, reason)
    data = (build or build_serialized)(model, precision, batch)
    cache.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, data)
    _write_atomically(record_path(path), (json.dumps(asdict(key), indent=1) + "\n").encode())
    return EngineResult(path, key, True, reason)


def check_engine(engine: Path, model: Path, env: BuildEnvironment) -> str | None:
    """None when ``engine`` was built from ``model`` by this TensorRT on this GPU, else why not
    (an engine without its record counts as stale: nothing says what it was built from)."""
    record = _read_record(engine)
    if record is None:
        return f"{record_path(engine).name} is missing: nothing says what it was built from"
    wanted = {"model_sha256": file_sha256(model), "gpu": env.gpu, "tensorrt": env.tensorrt}
    changed = [f"{k} {record.get(k)!r} -> {v!r}" for k, v in wanted.items()
               if record.get(k) != v]
    return ("stale: " + "; ".join(changed)) if changed else None


def _staleness(path: Path, key: EngineKey) -> str | None:
    if not path.is_file():
        return "no engine in the cache"
    record = _read_record(path)
    if record is None:
        return "the cached engine has no readable record"
    changed = key.differences(record)
    return ("stale: " + "; ".join(changed)) if changed else None


def _read_record(engine: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(record_path(engine).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def build_serialized(model: Path, precision: str, batch: int) -> bytes:
    """Parse the ONNX and build a serialized engine (TensorRT 10 API)."""
    trt = import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelError(f"TensorRT cannot parse {model}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)  # the graph's Q/DQ nodes give the scales
    for _ in range(PROFILES):
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            dims = tuple(tensor.shape)
            rest = tuple(int(d) for d in dims[1:])
            if any(d < 0 for d in rest):
                raise ModelError(f"{model}: input {tensor.name} has dynamic dims other than "
                                 f"the batch {dims}; vidpipe builds for a fixed image size")
            profile.set_shape(tensor.name, (1, *rest), (batch, *rest), (batch, *rest))
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ModelError(f"TensorRT could not build an engine from {model} ({precision}, "
                         f"batch {batch}); its log above says why")
    return bytes(serialized)
