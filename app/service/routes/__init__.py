"""The API's routes by resource, as module-level handlers on routers: ``streams.py``
(/api/streams: add, list, remove, analytics, snapshot, results), ``events.py`` (/api/events:
the feed, recent events, their media), ``system.py`` (stats, workers, /metrics, health).
``common.py`` holds what they share: the host and token dependencies, the answers' declared
errors and media types, server-sent events."""
