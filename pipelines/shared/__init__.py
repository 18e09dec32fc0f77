"""One detector for many streams (the service's): ``detector.py`` (SharedDetector: the model
loaded once, its stages run as a Pipeline, rebuilt on failure), ``fair.py`` (FairChannel: a
queue per stream, taken round-robin), ``routing.py`` (each stream's results to its own
sinks), ``restarts.py`` (the restart budget and its backoff)."""
