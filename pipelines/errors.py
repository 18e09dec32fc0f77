"""The one error hierarchy of vidpipe.

Each class also inherits the builtin a caller would naturally catch, as PyAV does, so that
``except FileNotFoundError`` keeps working for code that does not know vidpipe's types.
Messages name the bad value and what was expected: the CLI prints them as one line. The root
and ``ModelError`` are ``models.errors``'; this module adds the rest.
"""

from __future__ import annotations

from models.errors import ModelError, VidpipeError


class SourceError(VidpipeError, OSError):
    """A source cannot be opened or read: missing file, not a video, unreachable stream."""


class StreamLost(SourceError):
    """A live source stopped delivering (a stall, the server ending the stream): it
    reconnects; the message says what was seen."""


class DecodeError(VidpipeError, ValueError):
    """One packet or frame could not be decoded. The pipeline drops and counts it."""


class ConfigError(VidpipeError, ValueError):
    """A configuration value is out of range or unknown; the message names the allowed values."""


class DeviceError(VidpipeError, RuntimeError):
    """A device string is unknown, or the device's libraries are missing."""


class ChannelClosed(VidpipeError):
    """``get`` on a channel that is closed and drained: the normal end of a stream."""


__all__ = ["ChannelClosed", "ConfigError", "DecodeError", "DeviceError", "ModelError",
           "SourceError", "StreamLost", "VidpipeError"]
