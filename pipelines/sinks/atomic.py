"""Output files that appear whole or not at all: written under a temporary name, renamed on
commit, removed on failure — so a failed run leaves no half-written file behind."""

from __future__ import annotations

import os
from pathlib import Path


class AtomicPath:
    def __init__(self, final: Path) -> None:
        self.final = final
        self.partial = final.with_name(f".{final.name}.partial")

    def commit(self) -> None:
        os.replace(self.partial, self.final)

    def discard(self) -> None:
        self.partial.unlink(missing_ok=True)
