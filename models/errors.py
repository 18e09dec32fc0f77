"""Errors of the model side. ``pipelines.errors`` builds on these (imports flow one way)."""


class ModelError(ValueError):
    """A model file or its card cannot be used: unreadable, not ONNX, or not what it claims."""
