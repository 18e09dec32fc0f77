"""Which hosts a camera or a webhook may name: plain ASCII unless allowed, and inside
``allowed_networks`` after DNS. Used by the service for cameras and by the event outputs
(of a run and of the service) for webhooks."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address
from urllib.parse import urlsplit

from app.errors import SourceRejected


def check_camera_host(url: str, networks: Sequence[IPv4Network | IPv6Network] | None,
                      allow_idn: bool, what: str = "camera") -> None:
    """Refuse a host (a camera's; a webhook's, with ``what``) that is not ASCII (an IDN, or
    bidi controls such as U+202E that make a name read as another) unless ``allow_idn``, or,
    with ``networks``, one that resolves to any address outside them. Blocking (DNS): run it
    off the event loop."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host.isascii() and not allow_idn:
        raise SourceRejected(f"{what} host {ascii(host)} is not plain ASCII (an international "
                             "name or invisible direction marks); set allow_idn_hosts to "
                             "allow it")
    if networks is None:
        return
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, parts.port or 554,
                                                             type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError) as e:
        raise SourceRejected(f"{what} host {ascii(host)} does not resolve ({e})") from None
    outside = sorted(a for a in found
                     if not any(ip_address(a.split("%")[0]) in net for net in networks))
    if outside:
        raise SourceRejected(f"{what} host {ascii(host)} resolves to {', '.join(outside)}, "
                             "outside allowed_networks")
