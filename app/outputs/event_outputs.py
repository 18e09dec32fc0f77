"""The event outputs of a run or of the service, opened together and closed together: a file
(always), MQTT and webhooks where configured, and the dead-letter file behind them."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from ipaddress import IPv4Network, IPv6Network

from app.errors import SourceRejected
from app.hosts import check_camera_host
from app.outputs.config import EventsConfig
from app.outputs.mqtt import MqttEvents, parse_mqtt_url
from app.outputs.webhook import WebhookEvents, check_webhook_url
from pipelines.errors import ConfigError
from pipelines.events.files import DeadLetters
from pipelines.events.sink import EventOutput
from pipelines.metrics import PipelineMetrics

log = logging.getLogger(__name__)

SECRET_VARIABLE = "VIDPIPE_WEBHOOK_SECRET"


def close_in_turn(*steps: Callable[[], object] | None) -> None:
    """Run each closing step whatever the ones before it did (the network sinks deliver
    what they hold even if writing a medium failed); the first error is raised at the end."""
    error: BaseException | None = None
    for step in steps:
        if step is None:
            continue
        try:
            step()
        except BaseException as e:  # noqa: BLE001 -- kept, raised once every step ran
            error = error or e
    if error is not None:
        raise error


def check_event_outputs(events: EventsConfig,
                        networks: Sequence[IPv4Network | IPv6Network] | None,
                        allow_idn: bool) -> None:
    """Every webhook URL http(s) and the secret set; every webhook's and the broker's host
    inside ``allowed_networks`` (after DNS, as a camera's): ConfigError naming the first that
    is not. Blocking (DNS). The connections are checked again each time they are made."""
    if events.webhooks and not os.environ.get(SECRET_VARIABLE):
        raise ConfigError(f"webhooks need {SECRET_VARIABLE} set (the key their signatures "
                          "are made with)")
    hosts = [(url, "webhook") for url in events.webhooks]
    for url in events.webhooks:
        check_webhook_url(url)
    if events.mqtt is not None:
        host, port = parse_mqtt_url(events.mqtt)[:2]
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address
        hosts.append((f"mqtt://{shown}:{port}", "MQTT broker"))
    for url, what in hosts:
        try:
            check_camera_host(url, networks, allow_idn, what=what)
        except SourceRejected as e:
            raise ConfigError(str(e)) from None


class EventOutputs:
    def __init__(self, config: EventsConfig, metrics: PipelineMetrics,
                 first: Sequence[EventOutput] = (), instance: str | None = None,
                 networks: Sequence[IPv4Network | IPv6Network] | None = None) -> None:
        """``first``: outputs opened by the caller (the events file), published to first;
        ``instance``: which of several processes of the service this is (a worker);
        ``networks``: where webhooks and the broker may be, checked at each connection."""
        self.config = config
        self.dead_letters = DeadLetters(config.dead_letter_path, metrics)
        self.outputs: list[EventOutput] = list(first)
        self._network: list[MqttEvents | WebhookEvents] = []
        try:
            if config.mqtt is not None:
                self._network.append(MqttEvents(config.mqtt, metrics, self.dead_letters,
                                                queue=config.queue, instance=instance,
                                                networks=networks))
            secret = os.environ.get(SECRET_VARIABLE, "").encode()
            for n, url in enumerate(config.webhooks, 1):
                name = "webhook" if len(config.webhooks) == 1 else f"webhook-{n}"
                self._network.append(WebhookEvents(url, secret, metrics, self.dead_letters,
                                                   name=name, queue_size=config.queue,
                                                   retries=config.retries, networks=networks))
        except BaseException:
            self.close()
            raise
        self.outputs.extend(self._network)
        for output in self._network:
            log.info("events to %s: %s", output.name, output.shown)

    def close(self, timeout_s: float = 5.0) -> None:
        """Each network sink delivers what it holds within ``timeout_s``; the rest goes to
        the dead-letter file."""
        for output in self._network:
            output.close(timeout_s)
        self._network = []
