"""Where events go, for a run and for the service alike: the ``events:`` settings
(``config.py``), MQTT (``mqtt.py``), signed webhooks (``webhook.py``), and the outputs opened
and closed together with the dead-letter file behind them (``event_outputs.py``)."""
