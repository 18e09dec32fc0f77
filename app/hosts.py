"""Which hosts a camera or a webhook may name: plain ASCII unless allowed, and inside
``allowed_networks`` after DNS (``pipelines.sources.address``). Used by the service for
cameras and by the event outputs (of a run and of the service) for webhooks, when they are
configured; the connections themselves are checked again each time they are made."""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network
from urllib.parse import urlsplit

from app.errors import SourceRejected
from pipelines.sources.address import AddressPolicy, AddressRefused


def check_camera_host(url: str, networks: Sequence[IPv4Network | IPv6Network] | None,
                      allow_idn: bool, what: str = "camera") -> None:
    """Refuse a host (a camera's; a webhook's, with ``what``) that is not ASCII unless
    ``allow_idn``, or, with ``networks``, one that resolves to any address outside them.
    Blocking (DNS): run it off the event loop."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    policy = AddressPolicy(networks, allow_idn)
    try:
        if networks is None:  # no lookup: any address will do
            policy.check_name(host, what)
        else:
            policy.resolve(host, parts.port or 554, what)
    except AddressRefused as e:
        raise SourceRejected(str(e)) from None
