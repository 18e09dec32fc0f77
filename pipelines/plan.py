"""The plan a CPU run makes before its first frame, as one phase that returns one value: how
many threads inference and decoding get (``pipelines.threads``) and which runtime runs the
model (``pipelines.infer.choice``), with the model opened on them.

With them, one frame's call on the chosen runtime and threads is timed (``call_ms``): the
batch size is capped by it where a latency budget is set (``pipelines.backends.common``).

Both are measured (inference and decoding timed, OpenVINO tried against ONNX Runtime), which
takes seconds, so a measured plan is kept in the cache (``models.cache``: ``plans/``) under a
key of everything it depends on: the model file's SHA-256 and its card's input and output,
the machine (CPU model, cores usable), the libraries' versions and the rules' own code, the
options that steer it, and the sources' kinds and sizes. A later run with the same key opens
the model on the stored plan at once, and says so; any change to the key measures again, as
``plan_cache=False`` (``--no-cache``) does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from models.backends.base import Backend
from models.backends.openvino import openvino_version
from models.cache import cache_dir, file_sha256, key_digest, write_atomically
from models.spec import ModelSpec
from pipelines.infer import choice
from pipelines.infer.choice import RuntimeDecision, RuntimeTrial, open_cpu_runtime, open_runtime
from pipelines.options import PipelineOptions
from pipelines.threads import ThreadPlan, measure_infer_ms

log = logging.getLogger(__name__)

PLAN_FORMAT = 2  # the stored entry's layout (2: with call_ms)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a pipeline runs with, decided before its first frame: its threads, the CPU
    runtime's choice (None on a GPU, where the device decides), the batch size the model
    takes; ``measured_at`` (Unix time, None: nothing measured) says when it was measured,
    and ``cached`` whether this run took it from the cache."""

    threads: ThreadPlan
    runtime: RuntimeDecision | None = None
    batch_size: int | None = None  # None: not fitted yet (``pipelines.backends``)
    call_ms: float | None = None  # one frame's call on the plan's threads (None: not timed)
    measured_at: float | None = None
    cached: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"threads": asdict(self.threads),
                "runtime": None if self.runtime is None else self.runtime.as_dict(),
                "batch_size": self.batch_size, "call_ms": self.call_ms,
                "measured_at": self.measured_at,
                "cached": self.cached}


def open_planned(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
                 options: PipelineOptions, *, scaled: bool) -> tuple[Backend, RunPlan]:
    """The model opened on the CPU as planned: the cached plan when there is one for this key
    (and ``options.plan_cache``), else a plan measured now and stored for the next run."""
    key = plan_key(model_path, spec, sources, options, scaled=scaled)
    entry = plans_dir() / f"{key_digest(key)}.json"
    if options.plan_cache:
        plan = _load(entry, key)
        if plan is not None and plan.runtime is not None:
            _log_cached(plan)
            return open_runtime(model_path, plan.runtime, plan.threads), plan
    backend, threads, decision = open_cpu_runtime(
        model_path, spec, sources, options.runtime, options.infer_threads,
        options.decode_threads, scaled=scaled)
    call_ms = measure_infer_ms(model_path, spec.input.image_shape, spec.input.dtype, 3,
                               backend=backend)  # one frame's call, on the plan's threads
    plan = RunPlan(threads, decision, call_ms=round(call_ms, 3), measured_at=time.time())
    _store(entry, key, plan)
    return backend, plan


def plans_dir() -> Path:
    return cache_dir() / "plans"


def plan_key(model_path: Path, spec: ModelSpec, sources: Sequence[Any],
             options: PipelineOptions, *, scaled: bool) -> dict[str, Any]:
    """Everything a CPU plan depends on, as JSON-ready data."""
    return {
        "format": PLAN_FORMAT,
        "rules": _rules_digest(),
        "model": file_sha256(model_path),
        "card": {"input": spec.input.model_dump(mode="json"),
                 "output": spec.output.model_dump(mode="json")},
        "machine": machine(),
        "libraries": libraries(),
        "options": {"runtime": options.runtime, "infer_threads": options.infer_threads,
                    "decode_threads": options.decode_threads, "scaled": scaled,
                    "ffmpeg_resize": options.ffmpeg_resize},
        "sources": [_source_kind(s) for s in sources],
    }


@cache
def machine() -> dict[str, Any]:
    """The CPU as the plan sees it: its model, its cores, and those this process may use."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu": cpu_model(), "arch": platform.machine(), "cores": os.cpu_count(),
            "usable": usable}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (where there is one), else the platform's."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def libraries() -> dict[str, str | None]:
    """The versions of what plans and runs the model (from package metadata: no imports)."""
    names = ("vidpipe", "onnxruntime", "av", "opencv-python-headless", "numpy")
    return {name: _version(name) for name in names} | {"openvino": openvino_version()}


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@cache
def _rules_digest() -> str:
    """The code that measures and decides a plan: a change to its rules measures again."""
    from pipelines import threads

    digest = hashlib.sha256()
    for module in (threads, choice):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()[:16]


def _source_kind(source: Any) -> Any:
    """A source as the plan depends on it: live, or a file's codec and picture size."""
    if getattr(source, "live", False):
        return "live"
    video = getattr(source, "video", None)
    context = getattr(video, "codec_context", None)
    if context is None:
        return type(source).__name__
    return {"codec": context.name, "size": [context.width, context.height]}


def _load(entry: Path, key: dict[str, Any]) -> RunPlan | None:
    """The plan stored for ``key``, or None (none stored, or one that cannot be read: said)."""
    try:
        stored = json.loads(entry.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("plan cache: %s cannot be read (%s); measuring again", entry, e)
        return None
    try:
        if stored["format"] != PLAN_FORMAT or stored["key"] != key:
            return None
        runtime = stored["runtime"]
        return RunPlan(ThreadPlan(**stored["threads"]),
                       RuntimeDecision(runtime["runtime"], runtime["reason"],
                                       tuple(RuntimeTrial(**t) for t in runtime["trials"])),
                       call_ms=stored["call_ms"], measured_at=float(stored["measured_at"]),
                       cached=True)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("plan cache: %s is not a plan (%s: %s); measuring again", entry,
                    type(e).__name__, e)
        return None


def _store(entry: Path, key: dict[str, Any], plan: RunPlan) -> None:
    record = {"format": PLAN_FORMAT, "key": key} | plan.as_dict()
    try:
        write_atomically(entry, json.dumps(record, indent=1) + "\n")
    except OSError as e:
        log.warning("plan cache: cannot write %s (%s); the next run measures again (set "
                    "VIDPIPE_CACHE_DIR to a folder this user can write)", entry,
                    e.strerror or e)


def _log_cached(plan: RunPlan) -> None:
    assert plan.runtime is not None and plan.measured_at is not None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(plan.measured_at))
    threads = plan.threads
    log.info("threads: inference %d x %d at once, decode %d per stream (cached, measured %s: "
             "%s)", threads.infer, threads.infer_workers, threads.decode, when, threads.reason)
    log.info("runtime: %s (cached, measured %s: %s)", plan.runtime.runtime, when,
             plan.runtime.reason)
