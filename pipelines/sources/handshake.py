"""HandshakeReader: a camera's RTSP answers, read until FFmpeg's connection is made, so that
a redirect never reaches FFmpeg (``pipelines/sources/guard.py``).

FFmpeg's own reader is lenient (lines end at ``\\n`` with every ``\\r`` dropped, a ``$`` at a
line's start skips an interleaved frame even inside a header, the status is the second word
of any first line, a ``Content-Length`` given twice counts by its last), and a camera that
wanted a redirect past a reader that disagreed with it would use each leniency. So this one
is strict, failing closed: it takes only what both read the same way — a first line
``RTSP/x.y NNN ...`` (or a request the server sends, ``METHOD URI RTSP/x.y``), header lines
``Name: value`` with a letter first, no ``\\r`` but one before the ``\\n``, at most one
``Content-Length`` (digits, 1 MiB at most), and ``$`` frames between messages — and refuses
anything else (HandshakeError: the connection ends). A 3xx answer's first line becomes a
``502`` and its ``Location`` is kept. Once told the connection is made (``opened``), bytes
pass as they are.
"""

from __future__ import annotations

import re

LINE_LIMIT = 8 * 1024  # a header line longer than this is not RTSP
BODY_LIMIT = 1024 * 1024  # nor a body larger than this, before the stream plays
_STATUS = re.compile(rb"^RTSP/\d\.\d (\d{3})(?: [^\r\n]*)?$")
_REQUEST = re.compile(rb"^[A-Z_]+ \S+ RTSP/\d\.\d$")
_FIELD = re.compile(rb"^([A-Za-z][A-Za-z0-9_.-]*):[ \t]*([^\r\n]*)$")
HELD = b"RTSP/1.0 502 Redirect held by vidpipe"


class HandshakeError(OSError):
    """The camera's bytes are not RTSP that vidpipe and FFmpeg read the same way."""


class HandshakeReader:
    """Feed it the camera's bytes; it gives back what may go on to FFmpeg now."""

    def __init__(self) -> None:
        self.opened = False  # set once FFmpeg's open has returned: then nothing is held
        self.redirect: str | None = None
        self._buffer = bytearray()
        self._first = True  # the next line is a message's first
        self._status = 0
        self._length: int | None = None
        self._location = ""
        self._passing = 0  # bytes of a body or a frame still to pass as they are

    def feed(self, data: bytes) -> bytes:
        if self.opened and not self._buffer and not self._passing:
            return data
        self._buffer += data
        out = bytearray()
        while self._buffer and self.redirect is None:
            if self._passing:
                n = min(self._passing, len(self._buffer))
                out += self._buffer[:n]
                del self._buffer[:n]
                self._passing -= n
            elif self._first and self._buffer[:1] == b"$":
                if len(self._buffer) < 4:
                    break
                self._passing = 4 + int.from_bytes(self._buffer[2:4], "big")
            elif not self._line(out):
                break
            if self.opened and self._first and not self._passing:
                out += self._buffer  # between messages once open: the rest passes
                self._buffer.clear()
        return bytes(out)

    def _line(self, out: bytearray) -> bool:
        """Take one whole line (False: not yet here), checked, into ``out``."""
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > LINE_LIMIT:
                raise HandshakeError("the camera's answer is not RTSP (a line without end)")
            return False
        raw = bytes(self._buffer[:end + 1])
        del self._buffer[:end + 1]
        line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        if b"\r" in line or b"\0" in line:
            raise HandshakeError("the camera's answer has a stray carriage return or NUL")
        if self._first:
            out += self._first_line(line, raw)
        elif line:
            self._field(line)
            out += raw
        else:
            out += raw
            self._end_of_header()
        return True

    def _first_line(self, line: bytes, raw: bytes) -> bytes:
        status = _STATUS.match(line)
        if status is None and _REQUEST.match(line) is None:
            raise HandshakeError(f"the camera's answer is not RTSP ({line[:40]!r})")
        self._first, self._length, self._location = False, None, ""
        self._status = int(status.group(1)) if status else 0
        if 300 <= self._status < 400:
            return HELD + raw[len(line):]
        return raw

    def _field(self, line: bytes) -> None:
        field = _FIELD.match(line)
        if field is None:
            raise HandshakeError(f"the camera's answer has a malformed line ({line[:40]!r})")
        name, value = field.group(1).lower(), field.group(2).decode("latin-1").strip()
        if name == b"content-length":
            if self._length is not None or not value.isdigit() or int(value) > BODY_LIMIT:
                raise HandshakeError("the camera's answer has a Content-Length vidpipe refuses")
            self._length = int(value)
        elif name == b"location":
            self._location = value

    def _end_of_header(self) -> None:
        self._first, self._passing = True, self._length or 0
        if 300 <= self._status < 400:
            self.redirect = self._location
