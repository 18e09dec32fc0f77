"""A small RTSP server for tests: an H.264 test pattern from GStreamer's RTSP server.

Run with Debian's ``/usr/bin/python3`` (``gi`` is a system package that a venv cannot import):

    /usr/bin/python3 tests/rtsp_server.py --port 8554 --path /cam --fps 30 --size 320x240

It prints ``READY`` once it listens on 127.0.0.1 and exits on SIGTERM or SIGINT. The media is
shared, so several clients watch one encoder; a live source with a keyframe every second lets a
client that (re)connects mid-stream start decoding within a second.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

HOST = "127.0.0.1"  # tests never serve or reach any other address


def launch_line(width: int, height: int, fps: int, pattern: str = "ball") -> str:
    """The media pipeline. ``key-int-max=fps`` puts a keyframe every second; ``insert-vui``
    and ``config-interval=-1`` repeat SPS/PPS with every keyframe, so a late joiner decodes.
    ``pattern``: videotestsrc's (``snow`` fills x264enc's 2 Mbit/s, as a busy camera)."""
    return (
        f"( videotestsrc is-live=true pattern={pattern} "
        f"! video/x-raw,width={width},height={height},framerate={fps}/1,format=I420 "
        f"! x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} bframes=0 "
        f"threads=1 insert-vui=true "
        f"! rtph264pay name=pay0 pt=96 config-interval=-1 )"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/cam")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--size", default="320x240", help="WIDTHxHEIGHT")
    parser.add_argument("--pattern", default="ball", choices=("ball", "snow"))
    args = parser.parse_args(argv)
    try:
        args.width, args.height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must be WIDTHxHEIGHT, got {args.size!r}")
    if not args.path.startswith("/"):
        parser.error(f"--path must start with '/', got {args.path!r}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address(HOST)
    server.set_service(str(args.port))
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch_line(args.width, args.height, args.fps, args.pattern))
    factory.set_shared(True)
    server.get_mount_points().add_factory(args.path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on {HOST}:{args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, signum, _quit, loop)
    print("READY", flush=True)
    loop.run()
    return 0


def _quit(loop: GLib.MainLoop) -> bool:
    loop.quit()
    return GLib.SOURCE_REMOVE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
