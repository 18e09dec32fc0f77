"""Stream URLs: check them before connecting, and hide their credentials everywhere else.

Cameras put user names and passwords in the URL (``rtsp://admin:secret@10.0.0.5/stream1``) and
sometimes in its query (``?user=admin&password=secret``). Such a URL must never reach a log line,
a metric label, an error message or an API response, so everything that shows a URL shows
``redact(url)``, and text that may quote one (an FFmpeg error) goes through ``redact_text``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pipelines.errors import ConfigError

RTSP_SCHEMES = ("rtsp", "rtsps")
HIDDEN = "***"
# Query keys that carry secrets on common cameras and gateways.
_SECRET_KEYS = frozenset({
    "password", "passwd", "pass", "pwd", "user", "username", "token", "access_token", "key",
    "apikey", "api_key", "secret", "auth", "authorization", "signature", "sig", "credentials",
})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)(.*)$", re.DOTALL)
_QUERY_PAIR = re.compile(r"(?<=[?&;])([^=&;#]+)=([^&;#]*)")
_URL_IN_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^\s'\"<>]*@")


def redact(url: str) -> str:
    """``url`` without its credentials: ``rtsp://user:pass@host/x`` -> ``rtsp://***@host/x``.

    Everything between the scheme and the *last* ``@`` goes, not only a well-formed user-info
    part: a password with an unescaped ``/`` or ``@`` would otherwise leak through a strict
    parser (a string without a scheme is treated the same way). Secret-looking query values are
    hidden too. The rest (scheme, host, port, path) stays, so a log still says which camera it
    is about. Never raises: it runs inside error handling.
    """
    url = str(url)
    match = _SCHEME.match(url)
    scheme, rest = match.groups() if match is not None else ("", url)
    if "@" in rest:
        rest = HIDDEN + rest[rest.rindex("@"):]
    return scheme + _QUERY_PAIR.sub(_hide_secret_value, rest)


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it hidden (FFmpeg errors quote the URL)."""
    return _URL_IN_TEXT.sub(lambda m: m.group(1) + HIDDEN + "@", text)


def validate_rtsp_url(url: str) -> str:
    """``url`` unchanged if it is an ``rtsp://`` or ``rtsps://`` URL with a host; otherwise a
    ConfigError that names what was expected (and shows the URL redacted)."""
    expected = "expected rtsp://[user:password@]host[:port]/path (or rtsps://)"
    if not isinstance(url, str):
        raise ConfigError(f"stream URL must be a string, got {type(url).__name__}; {expected}")
    shown = redact(url)
    if url != url.strip() or any(c.isspace() or ord(c) < 32 for c in url):
        raise ConfigError(f"stream URL {shown!r} contains whitespace; {expected}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a bad port or a broken IPv6 literal
        # urllib's words quote the text it took for a port, which may be part of a password
        raise ConfigError(f"stream URL {shown!r} is malformed (a port that is not a number, "
                          f"a broken IPv6 address, or a password with # ? / not percent-"
                          f"encoded); {expected}") from None
    # Without "://" urlsplit takes "user:" for a scheme: show no part of such a string.
    scheme = parts.scheme.lower() if "://" in url else ""
    if scheme not in RTSP_SCHEMES:
        got = f"scheme {scheme!r}" if scheme else "no scheme"
        raise ConfigError(f"stream URL {shown!r} has {got}; {expected}")
    if not parts.hostname:
        raise ConfigError(f"stream URL {shown!r} has no host; {expected}")
    if port == 0:
        raise ConfigError(f"stream URL {shown!r} has port 0; {expected}")
    return url


def _hide_secret_value(match: re.Match[str]) -> str:
    key, value = match.groups()
    return f"{key}={HIDDEN}" if key.lower() in _SECRET_KEYS and value else match.group(0)
