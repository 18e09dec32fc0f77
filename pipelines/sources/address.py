"""Which addresses a connection may reach: hosts in plain ASCII unless allowed, and every
address a name resolves to inside ``allowed_networks``. Checked where the connection is made
(a camera's each time it connects, a redirect's target before it is followed), so that a name
pointed elsewhere after start reaches nothing outside the networks."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_address

from pipelines.errors import SourceError

Networks = Sequence[IPv4Network | IPv6Network]


class AddressRefused(SourceError):
    """A host the policy does not allow (its words say why, without credentials)."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """``networks``: the addresses connections may reach (None: any); ``allow_idn``: host
    names outside ASCII; ``max_redirects``: how many RTSP redirects a camera may send us
    through per connection (0: none is followed)."""

    networks: Networks | None = None
    allow_idn: bool = False
    max_redirects: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.max_redirects <= 10:
            raise ValueError(f"max redirects must be in 0..10, got {self.max_redirects}")

    def resolve(self, host: str, port: int, what: str = "camera") -> list[str]:
        """The addresses ``host`` resolves to now, all inside the networks, or AddressRefused.
        Blocking (DNS)."""
        self.check_name(host, what)
        try:
            found = [str(info[4][0]) for info in socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM)]
        except (OSError, UnicodeError) as e:
            raise AddressRefused(f"{what} host {ascii(host)} does not resolve ({e})") from None
        outside = sorted({a for a in found if not self.allows(a)})
        if outside:
            raise AddressRefused(f"{what} host {ascii(host)} resolves to "
                                 f"{', '.join(outside)}, outside allowed_networks")
        return list(dict.fromkeys(found))

    def check_name(self, host: str, what: str = "camera") -> None:
        """Refuse a name outside ASCII (an IDN, or bidi controls such as U+202E that make a
        name read as another) unless ``allow_idn``."""
        if not host.isascii() and not self.allow_idn:
            raise AddressRefused(f"{what} host {ascii(host)} is not plain ASCII (an "
                                 "international name or invisible direction marks); set "
                                 "allow_idn_hosts to allow it")

    def allows(self, address: str) -> bool:
        """Whether one address (an IP, with or without an IPv6 zone) is inside the networks."""
        if self.networks is None:
            return True
        ip = ip_address(address.split("%")[0])
        return any(ip in net for net in self.networks)
