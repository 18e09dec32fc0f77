"""The root of vidpipe's one error tree, and the model side's error. They live here, at the
bottom of the layers, so that ``models`` raises the same ``ModelError`` that ``pipelines`` and
``app`` catch; ``pipelines.errors`` adds the rest of the tree."""


class VidpipeError(Exception):
    """Base of every error vidpipe raises on purpose."""


class ModelError(VidpipeError, ValueError):
    """A model file or its card cannot be used: unreadable, not ONNX, or not what it claims."""
