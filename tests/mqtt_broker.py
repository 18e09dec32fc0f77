"""A real MQTT broker for the event tests: Debian's mosquitto on 127.0.0.1, with persistence
(a subscriber's session and its queued messages survive a restart), and a subscriber that
records what arrives. ``apt-get install mosquitto``; the tests skip without it, and fail
instead when ``REQUIRE_MQTT=1``."""

from __future__ import annotations

import getpass
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.requires import unavailable

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def mosquitto_missing() -> str | None:
    if not Path(MOSQUITTO).is_file():
        return "mosquitto is not installed (apt-get install mosquitto)"
    return None


def skip_or_fail(reason: str) -> None:
    unavailable("mqtt", reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.config = folder / "mosquitto.conf"
        # started as root, mosquitto drops to its own user, which cannot write here: it
        # would keep no persistence file, and a restart would lose the sessions
        self.config.write_text(f"user {getpass.getuser()}\n"
                               f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                               f"persistence true\npersistence_location {folder}/\n"
                               "autosave_interval 1\n"
                               f"log_dest file {folder}/mosquitto.log\n")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}")

    def stop(self) -> None:
        """SIGTERM: the broker saves its sessions and queued messages, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(10)
        self.process = None


class Subscriber:
    """A persistent-session QoS 1 subscriber recording every message of ``topic``."""

    def __init__(self, port: int, topic: str) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, bytes, bool]] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-subscriber",
                                  clean_session=False)
        self.client.reconnect_delay_set(1, 2)
        self.subscribed = threading.Event()
        self.client.on_connect = lambda c, u, f, r, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, m, r, p: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=5)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the subscriber could not subscribe"

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            self.messages.append((message.topic, message.payload, message.retain))

    def json(self, suffix: str) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(p) for t, p, _ in self.messages if t.endswith(suffix)]

    def wait_for(self, count: int, suffix: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.json(suffix)) < count:
            time.sleep(0.05)
        return self.json(suffix)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
