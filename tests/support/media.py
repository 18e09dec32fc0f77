"""Media files made from others for tests: a clip's video packets copied into a new file."""

from __future__ import annotations

from pathlib import Path

import av


def remux(source: Path, target: Path, *, options: dict[str, str] | None = None,
          metadata: dict[str, str] | None = None, container: str | None = None) -> Path:
    """Copy ``source``'s video packets into ``target`` (muxer ``options``, ``metadata``, a
    ``container`` format other than the name's), without decoding them."""
    with av.open(str(source)) as src, av.open(str(target), "w", format=container,
                                              options=options or {}) as dst:
        dst.metadata.update(metadata or {})
        stream = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                dst.mux(packet)
    return target
