"""Stream URLs: check them before connecting, and hide their credentials everywhere else.

Cameras put user names and passwords in the URL (``rtsp://admin:secret@10.0.0.5/stream1``),
in its query under any name (``?user=admin&pw=secret``, ``?passcode=...``) and in its fragment.
Such a URL must never reach a log line, a metric label, an error message or an API response,
so everything that shows a URL shows ``redact(url)``, and text that may quote one (an FFmpeg
error) goes through ``redact_text``. Redaction goes by the URL's parts, not by a list of
secret names: the user-info always, every query value whose key is not on a short list of
harmless ones, and the whole fragment.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pipelines.errors import ConfigError

RTSP_SCHEMES = ("rtsp", "rtsps")
HIDDEN = "***"
# Query keys whose values say which picture a camera sends, never who may see it: shown.
# Every other query value is hidden.
HARMLESS_QUERY_KEYS = frozenset({
    "channel", "subtype", "stream", "streamtype", "profile", "transport", "rtsp_transport",
    "tcp", "unicast", "resolution", "fps", "codec", "audio", "video",
})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)(.*)$", re.DOTALL)
_QUERY_SPLIT = re.compile(r"([&;])")
# In free text: a URL (redacted whole), else anything that runs up to an ``@`` (user-info
# of a URL whose scheme is mistyped or missing: hidden).
_SECRETS_IN_TEXT = re.compile(r"(?P<url>[A-Za-z][A-Za-z0-9+.\-]*:/{1,2}[^\s'\"<>]*)"
                              r"|(?P<who>[^\s'\"<>@]+@)")


def redact(url: str) -> str:
    """``url`` without its secrets: ``rtsp://user:pass@host/x?channel=1&pw=s#f`` ->
    ``rtsp://***@host/x?channel=1&pw=***#***``.

    Everything between the scheme and the *last* ``@`` goes, not only a well-formed user-info
    part: a password with an unescaped ``/``, ``#``, ``?`` or ``@`` would otherwise leak
    through a strict parser (a string without a scheme, or with a mistyped one, is treated the
    same way). Then every query value but the harmless ones, and the whole fragment. The rest
    (scheme, host, port, path) stays, so a log still says which camera it is about. Never
    raises: it runs inside error handling.
    """
    url = str(url)
    match = _SCHEME.match(url)
    scheme, rest = match.groups() if match is not None else ("", url)
    if "@" in rest:
        rest = HIDDEN + rest[rest.rindex("@"):]
    rest, hash_, _ = rest.partition("#")
    rest, question, query = rest.partition("?")
    shown = scheme + rest
    if question:  # pairs split at & and ; (both in use), the separators kept
        shown += "?" + "".join(part if part in "&;" else _shown_pair(part)
                               for part in _QUERY_SPLIT.split(query))
    return shown + ("#" + HIDDEN if hash_ else "")


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (FFmpeg errors quote the URL they opened), and
    anything else that looks like ``user:password@`` hidden."""
    return _SECRETS_IN_TEXT.sub(
        lambda m: redact(m.group("url")) if m.group("url") else HIDDEN + "@", str(text))


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


def _shown_pair(pair: str) -> str:
    key, equals, value = pair.partition("=")
    if not equals:
        return HIDDEN if key else key  # a bare token (``?s3cret``) may be the secret itself
    return pair if key.lower() in HARMLESS_QUERY_KEYS or not value else f"{key}={HIDDEN}"
