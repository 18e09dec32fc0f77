"""vidpipe's faces: the CLI (and, later, the service and its API)."""

__version__ = "0.1.0"
