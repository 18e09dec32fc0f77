"""An RTSP source's settings checked before anything connects: one ConfigError naming the
allowed values, never the password."""

from __future__ import annotations

from pipelines.errors import ConfigError
from pipelines.sources.address import AddressPolicy
from pipelines.sources.url import redact

TRANSPORTS = ("tcp", "udp", "udp_multicast", "http", "https")


def check_settings(shown: str, stream_id: str, transport: str, max_attempts: int | None,
                   seconds: dict[str, float], policy: AddressPolicy) -> None:
    """Refuse settings that cannot work, naming the allowed values (and never the password)."""
    if "://" in stream_id and redact(stream_id) != stream_id:
        # the stream id becomes a metric label and an API key: it must not carry credentials
        raise ConfigError(f"stream id {redact(stream_id)!r} holds credentials; name the stream "
                          "instead (e.g. 'lobby')")
    if transport not in TRANSPORTS:
        raise ConfigError(f"{shown}: transport must be one of {TRANSPORTS}, got {transport!r}")
    if (transport != "tcp" or shown.startswith("rtsps:")) and policy.networks is not None:
        raise ConfigError(f"{shown}: only plain rtsp:// over tcp can be held to "
                          "allowed_networks (FFmpeg makes the others' connections itself)")
    for name, value in seconds.items():
        if value <= 0:
            raise ConfigError(f"{shown}: {name} must be > 0 s, got {value}")
    if max_attempts is not None and max_attempts < 1:
        raise ConfigError(f"{shown}: max attempts must be >= 1 or None, got {max_attempts}")
