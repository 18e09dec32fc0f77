"""TensorRT engines built from ONNX, cached by everything that makes an engine valid.

An engine is only good for the model it was built from, the GPU it was built on, the TensorRT
version that built it, the largest batch it was built for and its precision. Those five make
its ``EngineKey``; the key's digest names the file in the cache, and a JSON record beside the
engine repeats the key. ``ensure_engine`` reuses an engine only when the record matches the
key of the model and machine at hand, and rebuilds otherwise, saying why (a changed model, a
new TensorRT, another GPU): a stale engine is never reused silently. ``check_engine`` makes
the same check for an engine a user put beside a model (``model.engine``), for the pipeline.

Precisions, for TensorRT 11's strongly typed networks (no FP16 or INT8 builder flags: a
layer runs in the type the model gives it; TensorRT 10 builds the same way): ``fp16`` from
the model converted to FP16 first (``models/fp16.py``: mixed where FP16 would be wrong; a
model that cannot be converted is built FP32, and said so); ``int8`` from a QDQ model (the
Q/DQ scales vidpipe's quantizer wrote decide what runs in INT8, the rest runs FP32);
``fp32`` for reference. Each engine has two optimization profiles (batch 1..``batch``), one
per execution context of the double-buffered TensorRT backend. The record beside an engine
names the precision it was actually built in: the count of its layers by precision, read
with TensorRT's engine inspector, and the precision that follows from it.

TensorRT is imported lazily: without it, building says so (``DeviceUnavailable``), and the
cache logic runs (and is tested) with the build step injected.

UNVERIFIED: no GPU with TensorRT has run this module; it follows the TensorRT 11 Python API
(``Builder``, ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``, ``OnnxParser``,
``create_optimization_profile``, ``build_serialized_network``, ``EngineInspector``), checked
name by name against the real bindings by ``tests/gpu_api``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from models.cache import cache_dir, file_sha256, key_digest, write_atomically
from models.errors import ModelError
from models.fp16 import to_fp16

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
        return key_digest(asdict(self))

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
    precision: str = ""  # what it runs in, as its record says


@dataclass(frozen=True, slots=True)
class BuiltEngine:
    """A serialized engine, its layers counted by precision (empty: TensorRT gave no layer
    information), and what was built when it differs from what was asked (``note``)."""

    data: bytes
    layers: dict[str, int]
    note: str = ""


Builder = Callable[[Path, str, int], BuiltEngine]


def built_precision(requested: str, layers: dict[str, int]) -> tuple[str, bool]:
    """The precision an engine runs in, from its layers' count by precision (``int8`` if
    any layer is INT8, else ``fp16`` if any is FP16, else ``fp32``), and whether the layers
    said so; without layer information, the precision asked for, unconfirmed."""
    if not layers:
        return requested, False
    if layers.get("INT8"):
        return "int8", True
    return ("fp16" if layers.get("FP16") else "fp32"), True


def default_cache_dir() -> Path:
    """VIDPIPE_ENGINE_CACHE, else ``engines/`` in vidpipe's cache (``models.cache``)."""
    configured = os.environ.get("VIDPIPE_ENGINE_CACHE")
    return Path(configured) if configured else cache_dir() / "engines"


def import_tensorrt() -> Any:
    from models.backends.tensorrt import import_tensorrt as _import

    return _import()


def current_environment(device: int = 0) -> BuildEnvironment:
    """The GPU's name and TensorRT's version; DeviceUnavailable when either is missing."""
    trt = import_tensorrt()
    import torch

    from models.backends.device import DeviceUnavailable

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
        built = (_read_record(path) or {}).get("built", {})
        return EngineResult(path, key, False, "cached", built.get("precision", precision))
    log.info("engine %s: building (%s)", path.name, reason)
    built = (build or build_serialized)(model, precision, batch)
    actual, confirmed = built_precision(precision, built.layers)
    if actual != precision:
        log.warning("engine %s: asked for %s, built %s%s", path.name, precision, actual,
                    f" ({built.note})" if built.note else "")
    cache.mkdir(parents=True, exist_ok=True)
    write_atomically(path, built.data)
    record = asdict(key) | {"built": {"precision": actual, "confirmed_by_layers": confirmed,
                                      "layers": built.layers, "note": built.note}}
    write_atomically(record_path(path), json.dumps(record, indent=1) + "\n")
    return EngineResult(path, key, True, reason, actual)


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


def build_serialized(model: Path, precision: str, batch: int) -> BuiltEngine:
    """Parse the ONNX (converted to FP16 first for ``fp16``) into a strongly typed network
    and build a serialized engine; its layers counted by precision."""
    trt = import_tensorrt()
    source, note = model.read_bytes(), ""
    if precision == "fp16":
        try:
            source = to_fp16(model)
        except ModelError as e:
            note = f"built FP32: {e}"
            log.warning("%s", note)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(source):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelError(f"TensorRT cannot parse {model}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # each layer's precision
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
    data = bytes(serialized)
    return BuiltEngine(data, _layer_precisions(trt, logger, data), note)


def _layer_precisions(trt: Any, logger: Any, data: bytes) -> dict[str, int]:
    """The engine's layers counted by precision (its inspector's JSON); empty when the
    TensorRT at hand does not say."""
    try:
        engine = trt.Runtime(logger).deserialize_cuda_engine(data)
        inspector = engine.create_engine_inspector()
        info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    except Exception as e:  # an older TensorRT, or no detail: the record says unconfirmed
        log.warning("the engine's layers could not be read (%s)", e)
        return {}
    return layer_precisions(info)


def layer_precisions(info: dict[str, Any]) -> dict[str, int]:
    """Layers by precision in an engine inspector's JSON: a layer's ``Precision`` where it
    has one, else the type of its first output (``Format/Datatype``)."""
    counts: dict[str, int] = {}
    for layer in info.get("Layers", []):
        if not isinstance(layer, dict):
            continue  # a name only: the engine was built without detailed profiling
        kind = str(layer.get("Precision", ""))
        if not kind and layer.get("Outputs"):
            kind = str(layer["Outputs"][0].get("Format/Datatype", ""))
        for name, words in (("INT8", ("int8",)), ("FP16", ("fp16", "half")),
                            ("FP32", ("fp32", "float"))):
            if any(w in kind.lower() for w in words):
                counts[name] = counts.get(name, 0) + 1
                break
    return counts
