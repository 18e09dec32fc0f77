"""The service (``vidpipe serve``): streams on shared detectors in this process
(``service.py``, ``detectors.py``, ``streams.py``, ``results.py``, ``events.py``) or on Ray
workers (``cluster/``), behind one ``StreamHost`` (``host.py``); its HTTP API (``api.py``,
``routes/``, ``schemas.py``), its config (``config.py``) and its dashboard (``dashboard/``)."""
