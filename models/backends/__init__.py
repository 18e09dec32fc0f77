"""Inference backends: synchronous, single-threaded objects behind one small protocol."""

from models.backends.base import Backend, TensorInfo

__all__ = ["Backend", "TensorInfo"]
