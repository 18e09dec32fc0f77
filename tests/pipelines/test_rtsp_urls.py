"""Camera URLs: redaction of credentials, what is accepted, and the reconnect backoff."""

from __future__ import annotations

import pytest

from pipelines.errors import ConfigError
from pipelines.sources.backoff import Backoff
from pipelines.sources.rtsp import RtspSource
from pipelines.sources.url import redact, redact_text, validate_rtsp_url

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize("url, shown", [
    ("rtsp://user:pass@host/x", "rtsp://***@host/x"),
    ("rtsp://admin:s3cr3t@10.0.0.5:8554/live/ch1?tcp=1", "rtsp://***@10.0.0.5:8554/live/ch1?tcp=1"),
    ("rtsps://user@cam.local/stream", "rtsps://***@cam.local/stream"),
    ("rtsp://user:p@ss/w0rd@host/x", "rtsp://***@host/x"),  # unescaped @ and / in a password
    ("rtsp://host/x?user=admin&password=hunter2&channel=1",
     "rtsp://host/x?user=***&password=***&channel=1"),
    ("rtsp://127.0.0.1:8554/cam", "rtsp://127.0.0.1:8554/cam"),
    ("not a url", "not a url"),
    ("admin:pass@cam/x", "***@cam/x"),  # no scheme: still hidden
])
def test_redact_hides_credentials_and_keeps_the_rest(url, shown):
    assert redact(url) == shown


def test_redact_text_hides_every_url_quoted_in_an_error():
    text = "[Errno 111] Connection refused: 'rtsp://admin:hunter2@10.0.0.5/a' (was rtsp://u:p@h/b)"
    assert redact_text(text) == ("[Errno 111] Connection refused: 'rtsp://***@10.0.0.5/a' "
                                 "(was rtsp://***@h/b)")


@pytest.mark.parametrize("url", [
    "rtsp://127.0.0.1:8554/cam", "RTSP://cam.local/stream", f"rtsps://admin:{SECRET}@[::1]/x",
])
def test_validate_accepts_rtsp_urls_with_a_host(url):
    assert validate_rtsp_url(url) == url


@pytest.mark.parametrize("url, complaint", [
    (f"http://admin:{SECRET}@cam/x", "scheme 'http'"),
    (f"admin:{SECRET}@cam/x", "scheme"),
    ("/dev/video0", "no scheme"),
    (f"rtsp://admin:{SECRET}@/x", "no host"),
    (f"rtsp://admin:{SECRET}@cam:99999/x", "malformed"),
    (f"rtsp://admin:{SECRET[:4]}#{SECRET[4:]}@cam/x", "not percent-encoded"),  # urllib quoted
    # the part before the # as the "port" it could not read
    (f"rtsp://admin:{SECRET}@cam:0/x", "port 0"),
    (f"rtsp://admin:{SECRET}@cam/x y", "whitespace"),
    (8554, "must be a string"),
])
def test_validate_rejects_what_is_not_an_rtsp_url_and_never_shows_the_password(url, complaint):
    with pytest.raises(ConfigError, match=complaint) as info:
        validate_rtsp_url(url)
    assert "expected rtsp://" in str(info.value)
    assert SECRET[:4] not in str(info.value) and SECRET[4:] not in str(info.value)


# -- the reconnection schedule --------------------------------------------------------------
def test_backoff_doubles_up_to_its_cap_and_starts_over_after_reset():
    backoff = Backoff(0.25, 2.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    backoff.reset()
    assert backoff.next_delay() == 0.25


def test_backoff_jitter_only_shortens_and_repeats_with_the_same_seed():
    import random

    def delays(seed):
        backoff = Backoff(0.25, 2.0, jitter=0.2, rng=random.Random(seed))
        return [backoff.next_delay() for _ in range(40)]

    bases = [min(2.0, 0.25 * 2**n) for n in range(40)]
    got = delays(7)
    assert all(0.8 * base <= d <= base for d, base in zip(got, bases, strict=True))
    assert len({round(d / b, 6) for d, b in zip(got, bases, strict=True)}) > 30  # really random
    assert delays(7) == got and delays(8) != got


def test_source_seeds_its_backoff():
    def first(seed):
        source = RtspSource("rtsp://127.0.0.1:1/x", "a", rng_seed=seed)
        return [source.backoff.next_delay() for _ in range(5)]

    assert first(3) == first(3) != first(4)
