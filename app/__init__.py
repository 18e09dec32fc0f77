"""vidpipe's faces: the CLI, the service and its HTTP API, the benchmarks."""

__version__ = "0.1.0"
