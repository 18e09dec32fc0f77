"""The service on Ray workers: ``controller.py`` (Cluster, the API's StreamHost), ``supervision.py``
(heartbeats, failover), ``workers.py`` (the pool and its books), ``worker.py`` (a Service in
an actor), ``placement.py``, ``merge.py`` (/api/stats), ``metrics.py`` (/metrics)."""
