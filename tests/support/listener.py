"""A TCP listener for tests that stand in for a peer (a camera, a broker): it counts the
connections it takes and hands each to ``answer`` on a thread of its own."""

from __future__ import annotations

import socket
import threading


class Listener:
    """Listens on ``host`` (a free port); subclasses answer each connection."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.connections = 0
        self._server = socket.create_server((host, 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer_closing, args=(client,), daemon=True).start()

    def _answer_closing(self, client: socket.socket) -> None:
        with client:
            try:
                self.answer(client)
            except OSError:
                pass

    def answer(self, client: socket.socket) -> None:
        """What the peer does with one connection (nothing, by default)."""

    def close(self) -> None:
        self._server.close()
