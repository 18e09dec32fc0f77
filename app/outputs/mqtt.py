"""MqttEvents: events to an MQTT broker (paho-mqtt), QoS 1.

Topics under the URL's prefix: ``<prefix>/<stream>/events`` (every event, in the order
published), ``<prefix>/<stream>/state`` (the stream's line and zone counts after its latest
events, retained) and ``<prefix>/availability`` (``online``, retained; the broker's last will
says ``offline`` if vidpipe vanishes, and vidpipe says it when it stops).

Nothing accepted is lost while the broker is away: paho keeps every QoS 1 message until the
broker acknowledges it, across reconnects (it sends the unacknowledged ones again, so a
consumer may see an event twice: the ``id`` is its idempotency key). The queue is bounded
(``queue`` messages): past it an event goes to the dead-letter file, counted ``dropped``; one
still unacknowledged when vidpipe stops (after ``close``'s wait) too. ``publish`` never blocks
on the network: paho's own thread sends. With ``networks`` each connection's address is
checked once connected, before anything is sent on it (``CONNECT`` carries the password): a
broker name pointed elsewhere later reaches nothing, and events wait as for a broker away.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from app.outputs.checked_http import Networks, check_peer
from pipelines.errors import ConfigError
from pipelines.events.files import DeadLetters
from pipelines.metrics import PipelineMetrics
from pipelines.sources.url import redact

log = logging.getLogger(__name__)

TOPIC_PART = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


def topic_part(stream: str) -> str:
    """A stream id as one topic level: MQTT's wildcards (+ #) and level separator (/), and
    anything outside letters, digits, _ . -, become _ (the service's ids never have them;
    a file's name given to `vidpipe run` may)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stream) or "_"


def parse_mqtt_url(url: str) -> tuple[str, int, bool, str | None, str | None, str]:
    """``mqtt[s]://[user:password@]host[:port][/prefix]`` -> (host, port, tls, user,
    password, prefix); ConfigError naming what is wrong (the URL shown without its
    password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # its text quotes what it took for the port: maybe the password
        raise ConfigError(f"events MQTT URL {redact(url)}: malformed (a bad port, or a "
                          "password holding / # or ?: percent-encode it)") from None
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ConfigError(f"events MQTT URL {redact(url)}: the scheme must be mqtt:// or "
                          "mqtts://")
    if not parts.hostname:
        raise ConfigError(f"events MQTT URL {redact(url)}: no host")
    prefix = parts.path.strip("/") or "vidpipe"
    if not TOPIC_PART.match(prefix):
        raise ConfigError(f"events MQTT URL {redact(url)}: the prefix {prefix!r} may hold "
                          "letters, digits, _ . - and /")
    tls = parts.scheme == "mqtts"
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return parts.hostname, port or (8883 if tls else 1883), tls, user, password, prefix


class MqttEvents:
    name = "mqtt"

    def __init__(self, url: str, metrics: PipelineMetrics, dead_letters: DeadLetters, *,
                 queue: int = 10_000, instance: str | None = None,
                 networks: Networks | None = None) -> None:
        """``instance``: one of several processes publishing for the service (a cluster's
        worker), whose availability (and last will) is its own topic under
        ``<prefix>/availability/``, so that one worker lost is not the service offline;
        ``networks``: where the broker may be, checked at each connection (None: anywhere)."""
        import paho.mqtt.client as mqtt

        self._mqtt = mqtt
        host, port, tls, user, password, self.prefix = parse_mqtt_url(url)
        self.shown = redact(url)
        self._metrics, self._dead = metrics, dead_letters
        self.client = _client(mqtt, f"vidpipe-{secrets.token_hex(4)}", networks, self.shown)
        if user is not None:
            self.client.username_pw_set(user, password)
        if tls:
            self.client.tls_set()
        self.client.max_queued_messages_set(queue)
        self.client.max_inflight_messages_set(100)
        self.client.reconnect_delay_set(1, 4)
        self.availability = f"{self.prefix}/availability" + (
            "" if instance is None else f"/{topic_part(instance)}")
        self.client.will_set(self.availability, "offline", qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self._books = threading.Lock()  # never held while calling into paho
        self._pending: dict[int, dict[str, Any]] = {}  # mid -> event not yet acknowledged
        self._acked_early: set[int] = set()
        self._others: set[int] = set()  # mids of state and availability messages
        self._lost: set[int] = set()  # events in flight when the connection was lost
        self._connects = 0
        self.connected = threading.Event()
        self.client.connect_async(host, port, keepalive=15)
        self.client.loop_start()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if reason.is_failure:
            log.warning("events MQTT %s refused the connection: %s", self.shown, reason)
            return
        self._connects += 1
        self.connected.set()
        self._send(self.availability, "online")
        with self._books:
            again = len(self._lost & self._pending.keys())  # sent before, unacknowledged
            waiting = len(self._pending) - again
            self._lost = set()
        if self._connects > 1:
            log.info("events MQTT %s: connected again; %d event(s) sent again, %d kept while "
                     "it was away sent now", self.shown, again, waiting)
            if again:
                self._metrics.count_event(self.name, "retried", again)
        else:
            log.info("events MQTT %s: connected", self.shown)

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        if self.connected.is_set():
            with self._books:  # what the broker may never have had: paho sends it again
                self._lost = set(self._pending)
        self.connected.clear()
        if reason.is_failure:
            log.warning("events MQTT %s: connection lost (%s); events are kept until it is "
                        "back", self.shown, reason)

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any,
                    properties: Any) -> None:
        with self._books:
            if mid in self._others:
                self._others.discard(mid)
                return
            event = self._pending.pop(mid, None)
            if event is None:
                self._acked_early.add(mid)
                return
        self._metrics.count_event(self.name, "sent")

    def _register(self, mid: int, event: dict[str, Any] | None) -> None:
        """Remember what message ``mid`` was (an event, or None: a state or availability
        message), unless the broker acknowledged it before ``publish`` returned."""
        with self._books:
            if mid in self._acked_early:
                self._acked_early.discard(mid)
                early = True
            else:
                early = False
                if event is None:
                    self._others.add(mid)
                else:
                    self._pending[mid] = event
        if early and event is not None:
            self._metrics.count_event(self.name, "sent")

    def publish(self, event: dict[str, Any]) -> None:
        topic = f"{self.prefix}/{topic_part(event['stream'])}/events"
        info = self.client.publish(topic, json.dumps(event, separators=(",", ":")), qos=1)
        if info.rc == self._mqtt.MQTT_ERR_QUEUE_SIZE:
            self._dead.add(self.name, "queue full", event)
            return
        self._register(info.mid, event)

    def publish_state(self, stream: str, state: dict[str, Any]) -> None:
        self._send(f"{self.prefix}/{topic_part(stream)}/state",
                   json.dumps(state, separators=(",", ":")))

    def _send(self, topic: str, payload: str) -> None:
        """A retained message that is not an event (the latest one is what counts)."""
        info = self.client.publish(topic, payload, qos=1, retain=True)
        if info.rc != self._mqtt.MQTT_ERR_QUEUE_SIZE:
            self._register(info.mid, None)

    @property
    def unacknowledged(self) -> int:
        with self._books:
            return len(self._pending)

    def close(self, timeout_s: float = 5.0) -> None:
        """Say ``offline``, wait up to ``timeout_s`` for the broker to acknowledge what was
        published, then disconnect; what it has not acknowledged goes to the dead-letter
        file."""
        if self.connected.is_set():
            self._send(self.availability, "offline")
        deadline = time.monotonic() + timeout_s
        while self.unacknowledged and time.monotonic() < deadline:
            time.sleep(0.05)
        self.client.disconnect()
        self.client.loop_stop()
        with self._books:
            left, self._pending = list(self._pending.values()), {}
        for event in left:
            self._dead.add(self.name, "not acknowledged by the broker before stop", event)
        if left:
            log.warning("events MQTT %s: %d event(s) not acknowledged before the stop, kept "
                        "in %s", self.shown, len(left), self._dead.path)


def _client(mqtt: Any, client_id: str, networks: Networks | None, shown: str) -> Any:
    """A paho client whose connections, with ``networks``, are held to them: paho's socket
    made, its peer checked before paho sends on it (a refused one is paho's connection error:
    it waits and tries again, the events kept). paho 2.2's ``_create_socket_connection`` is
    the one place its sockets are made (pinned in pyproject.toml)."""
    if networks is None:
        return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    allowed: Networks = networks

    class Checked(mqtt.Client):  # type: ignore[misc,name-defined]
        refused = False  # said once until a connection is allowed again

        def _create_socket_connection(self) -> Any:
            sock = super()._create_socket_connection()
            try:
                check_peer(sock, allowed)
            except OSError as e:
                (log.debug if self.refused else log.warning)(
                    "events MQTT %s: %s; nothing sent, events kept", shown, e)
                self.refused = True
                raise
            self.refused = False
            return sock

    return Checked(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
