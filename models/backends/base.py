"""The Backend protocol every runtime implements (ONNX Runtime, TensorRT, torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A graph input or output. Dimensions that the graph leaves open are None."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str  # numpy dtype name: "float32", "uint8", ...

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the graph insists on, or None when any batch is allowed."""
        return self.shape[0] if self.shape else None


class Backend(Protocol):
    """A loaded model. Synchronous and single-threaded: the inference stage owns the thread."""

    @property
    def inputs(self) -> list[TensorInfo]: ...

    @property
    def outputs(self) -> list[TensorInfo]: ...

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class GraphPorts:
    """The inputs and outputs a backend read from its graph when it opened it, handed out as
    copies (a caller cannot change what the backend feeds)."""

    _inputs: list[TensorInfo]
    _outputs: list[TensorInfo]

    @property
    def inputs(self) -> list[TensorInfo]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorInfo]:
        return list(self._outputs)
