"""A pipeline run over files and cameras, as ``vidpipe run`` and ``vidpipe demo`` start it:
the request checked (``request.py``), the run with its outputs, signals and Prometheus port
(``runner.py``), its summary (``summary.py``), its events (``events.py``), the demo clip
(``demo.py``)."""
