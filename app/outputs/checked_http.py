"""HTTP connections held to ``allowed_networks`` each time they connect: the address a name
resolves to when the connection is made is the one checked, so a webhook whose name is
pointed somewhere else after start (a DNS change) reaches nothing outside the networks. The
check runs once the socket is connected, before anything is sent on it (over TLS, after the
handshake)."""

from __future__ import annotations

import socket
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from pipelines.sources.address import AddressPolicy, Networks


class AddressRefused(OSError):
    """A connection made to an address outside ``allowed_networks``: closed unused."""


def check_peer(sock: socket.socket | None, networks: Networks) -> None:
    """Close ``sock`` and raise AddressRefused if its peer is outside ``networks``."""
    if sock is None:
        return
    address = str(sock.getpeername()[0]).split("%")[0]
    if not AddressPolicy(networks).allows(address):
        sock.close()
        raise AddressRefused(f"connected to {address}, outside allowed_networks")


def _pool(base: type[HTTPConnectionPool], connection: type[HTTPConnection],
          networks: Networks) -> type[HTTPConnectionPool]:
    class Checked(connection):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            check_peer(self.sock, networks)

    return type(f"Checked{base.__name__}", (base,), {"ConnectionCls": Checked})


class CheckedAdapter(HTTPAdapter):
    def __init__(self, networks: Networks, **kwargs: Any) -> None:
        self.networks = list(networks)
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _pool(HTTPConnectionPool, HTTPConnection, self.networks),
            "https": _pool(HTTPSConnectionPool, HTTPSConnection, self.networks)}


def checked_session(networks: Networks | None) -> requests.Session:
    """A session that takes no proxy from the environment, its connections held to
    ``networks`` (None: any address)."""
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment sees what it sends
    if networks is not None:
        adapter = CheckedAdapter(networks)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


def refused(error: BaseException) -> AddressRefused | None:
    """The AddressRefused behind a request's error (urllib3 and requests wrap it), if any."""
    seen: set[int] = set()
    todo: list[Any] = [error]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, AddressRefused):
            return item
        todo.extend([item.__cause__, item.__context__, *item.args])
        todo.append(getattr(item, "reason", None))
    return None
