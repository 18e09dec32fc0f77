"""Where vidpipe keeps what it measured or built once, to reuse it on later runs: the thread
plan and runtime choice of a run (``plans/``) and TensorRT engines (``engines/``).

``VIDPIPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vidpipe``, else ``~/.cache/vidpipe``; the
images mount a volume there. Every entry is named by a digest of what it depends on, so an
entry is never reused for something else; a folder that cannot be written costs only the
reuse (the work is done again, and said so).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """The cache's root folder (not created here)."""
    configured = os.environ.get("VIDPIPE_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vidpipe"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable name for ``key`` (JSON-ready data): its canonical JSON's SHA-256."""
    blob = json.dumps(key, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_atomically(path: Path, data: str | bytes) -> None:
    """``data`` into ``path`` whole or not at all (a reader never sees half an entry)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
