"""A camera that is not up says why: the state past ``down_after_s``, the failure in words,
the attempts and the next retry; logged when the state changes, not at every retry."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import av
import pytest

from pipelines.sources.rtsp import RtspSource
from pipelines.sources.status import describe_failure
from tests.rtsp_fixtures import free_port, wait_until

SECRET = "s3cr3t-pw"


def run_in_thread(source: RtspSource) -> threading.Thread:
    thread = threading.Thread(target=lambda: list(source.packets()), daemon=True)
    thread.start()
    return thread


@contextmanager
def reading(source: RtspSource) -> Iterator[RtspSource]:
    """The source read on a thread of its own, as the decode stage reads it; closed after."""
    thread = run_in_thread(source)
    try:
        yield source
    finally:
        source.close()
        thread.join(5)


def test_a_camera_on_a_closed_port_is_unreachable_with_the_reason(caplog):
    caplog.set_level(logging.INFO, logger="pipelines.sources.rtsp")
    states: list[str] = []
    source = RtspSource(f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/cam", "door",
                        backoff_initial_s=0.05, backoff_max_s=0.1, down_after_s=0.5,
                        on_state=states.append)
    assert source.status.state == "connecting" and source.status.attempts == 0
    thread = run_in_thread(source)
    try:
        # told, not only shown: the status changes a moment before on_state hears of it,
        # and a close() in between leaves the change untold (CI saw states == ["stopped"])
        wait_until(lambda: "unreachable" in states, 5.0, "unreachable")
        wait_until(lambda: source.status.attempts >= 8, 5.0, "more attempts")
        status = source.status
        assert "connection refused" in (status.reason or "")
        assert status.next_retry_at is None or status.next_retry_at <= time.time() + 0.2
    finally:
        source.close()
        thread.join(5)
    assert states[0] == "unreachable" and states[-1] == "stopped"
    lines = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(lines) == 1, lines  # once per state change, not once per attempt
    assert "connection refused" in lines[0] and SECRET not in caplog.text


def test_a_camera_that_stays_connecting_until_down_after_s(caplog):
    with reading(RtspSource(f"rtsp://127.0.0.1:{free_port()}/cam", "door",
                            backoff_initial_s=0.05, backoff_max_s=0.1,
                            down_after_s=30.0)) as source:
        wait_until(lambda: source.status.attempts >= 3, 5.0, "three attempts")
        assert source.state == "connecting" and source.status.reason is not None


def test_a_silent_server_times_out_and_is_unreachable():
    with socket.socket() as listener:  # accepts connections and never answers them
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        with reading(RtspSource(f"rtsp://127.0.0.1:{port}/cam", "door", open_timeout_s=0.5,
                                read_timeout_s=0.5, backoff_initial_s=0.05,
                                backoff_max_s=0.1, down_after_s=0.8)) as source:
            wait_until(lambda: source.state == "unreachable", 10.0, "unreachable")
            assert "timed out" in (source.status.reason or ""), source.status


def test_a_wrong_path_on_a_real_server_is_an_error_at_once(rtsp_servers):
    server = rtsp_servers.start()
    url = server.url.replace(server.path, "/no-such-path")
    with reading(RtspSource(url, "door", backoff_initial_s=0.05, backoff_max_s=0.1,
                            down_after_s=60.0)) as source:
        # a camera that answers and refuses does not wait out down_after_s
        wait_until(lambda: source.state == "error", 10.0, "error")
        assert "404" in (source.status.reason or ""), source.status


@pytest.mark.parametrize(("error", "kind", "words"), [
    (av.error.HTTPUnauthorizedError(-1, "401 Unauthorized"), "error", "credentials (401)"),
    (av.error.HTTPForbiddenError(-1, "403 Forbidden"), "error", "(403)"),
    (av.error.HTTPNotFoundError(-1, "404 Not Found"), "error", "(404)"),
    (av.error.InvalidDataError(-1, "Invalid data"), "error", "not an RTSP stream"),
    (ConnectionRefusedError(111, "Connection refused"), "unreachable", "connection refused"),
    (TimeoutError(110, "Connection timed out"), "unreachable", "timed out"),
    (av.error.ExitError(-1, "Immediate exit requested"), "unreachable", "timed out"),
    (OSError(113, "No route to host"), "unreachable", "no route"),
])
def test_failures_are_told_in_words(error, kind, words):
    got_kind, got_words = describe_failure(error, "rtsp://127.0.0.1/cam")
    assert got_kind == kind and words in got_words


def test_a_host_that_does_not_resolve_is_named():
    kind, words = describe_failure(av.error.OSError(5, "Input/output error"),
                                   "rtsp://no-such-camera.invalid/cam")
    assert kind == "unreachable" and "does not resolve" in words
