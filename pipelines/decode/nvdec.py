"""NvdecDecoder: H.264 / HEVC / AV1 decoding on the GPU's NVDEC engine (PyNvVideoCodec).

Which PyNvVideoCodec API, and why: the *core* decoder (``CreateDecoder`` + ``Decode(packet)``),
fed with packets that PyAV demuxes. ``SimpleDecoder`` and ``ThreadedDecoder`` open the file
themselves (their own FFmpeg demuxer), so they would bypass the sources that own RTSP
timeouts and reconnection; SimpleDecoder also needs a seekable container, which a camera is
not, and ThreadedDecoder starts a thread of its own, which a passive part must not. The core
decoder decodes exactly the packets it is given, on the caller's thread.

What it does per packet:

- Annex B: MP4/MKV store H.264/HEVC as length-prefixed NAL units; NVDEC's parser wants start
  codes, with the parameter sets in band. ``AnnexB`` runs FFmpeg's ``*_mp4toannexb`` bitstream
  filter for those, and for streams that are Annex B already (RTSP) puts the parameter sets of
  the SDP (extradata) in front of the first packet.
- Decoding and colour conversion happen on the GPU: the decoder hands out NV12 (the decoded
  Y, U and V samples, exact), which reaches torch through DLPack (``torch.from_dlpack``) with
  no host copy, and ``pipelines.decode.yuv.nv12_to_rgb`` converts it with the matrix and range
  the stream is tagged with, in FFmpeg's arithmetic: the picture equals the CPU path's, every
  pixel. NVDEC's own RGB output (``outputColorType=RGB``) is not FFmpeg's conversion: on an
  H200 it agreed on 64% of the CPU pipeline's boxes for a 720p clip (docs/GPU.md).
  The matrix and range are the stream's at open (the CPU path reads each frame's; a stream
  that changes its tags mid-way is not followed). 8-bit 4:2:0 streams of even size in a colour
  space measured equal to FFmpeg's only: others (10-bit, 4:4:4, odd sizes, BT.2020 constant
  luminance, a format unknown at open) are refused at open, and decode on the CPU.
- The decoder recycles its output surfaces on the next ``Decode`` call; the conversion reads
  the surface and writes the RGB picture into a tensor of the frame's own. The decoder works
  on this stage's CUDA stream, so the conversion is ordered after the decoding without any
  wait; an event recorded after it becomes ``Frame.ready``.

Decode errors inside NVDEC are concealed by the driver (it does not raise); errors the binding
raises become DecodeError, which the stage counts as ``decode_error``.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import av
import numpy as np
import torch

from pipelines.cuda import import_gpu_library, parse_device, record_ready, require_cuda
from pipelines.decode.picture import DecodedPicture
from pipelines.decode.yuv import FULL_RANGE, UNTAGGED, YuvMatrix, nv12_to_rgb
from pipelines.errors import DecodeError, DeviceError

log = logging.getLogger(__name__)

NVDEC_CODECS = {"h264": "H264", "hevc": "HEVC", "av1": "AV1"}
_START_CODES = (b"\x00\x00\x00\x01", b"\x00\x00\x01")
NV12_FORMATS = ("yuv420p", "yuvj420p")  # what FFmpeg calls the 8-bit 4:2:0 NVDEC outputs as NV12


class AnnexB:
    """Turns a video stream's packets into the Annex-B payloads NVDEC parses.

    One instance per decoder: the parameter sets go in front of the first packet it sees.
    """

    def __init__(self, stream: av.video.stream.VideoStream) -> None:
        codec = stream.codec_context.name
        extradata = bytes(stream.codec_context.extradata or b"")
        self._bsf: Any = None
        self._prefix = b""
        if codec in ("h264", "hevc"):
            if extradata.startswith(_START_CODES):
                self._prefix = extradata  # RTSP: SPS/PPS from the SDP, already Annex B
            elif extradata:
                self._bsf = av.bitstream.BitStreamFilterContext(f"{codec}_mp4toannexb", stream)

    def payloads(self, packet: av.Packet | None) -> list[tuple[bytes, int | None]]:
        """(Annex-B bytes, pts) for ``packet``; ``None`` or an empty packet flushes."""
        if packet is None or packet.size == 0:
            tail = self._bsf.filter(None) if self._bsf is not None else []
            return [(bytes(p), p.pts) for p in tail]
        if self._bsf is not None:
            return [(bytes(p), p.pts) for p in self._bsf.filter(packet)]
        data = bytes(packet)
        if self._prefix:
            data, self._prefix = self._prefix + data, b""
        return [(data, packet.pts)]


class NvdecDecoder:
    """Decode one video stream's packets on NVDEC into RGB tensors on ``device``.

    ``low_latency`` hands each picture out as soon as it is decoded (live cameras); the
    default keeps the decoder's few frames of reordering delay, which files do not mind.
    A PictureDecoder like PyAVDecoder, but its pictures are DecodedPictures on the GPU.
    """

    def __init__(self, stream: av.video.stream.VideoStream, device: str = "cuda:0", *,
                 low_latency: bool = False) -> None:
        spec = parse_device(device)
        nvc = import_gpu_library("PyNvVideoCodec", "pynvvideocodec", "NVDEC decoding")
        self.device = require_cuda(spec)
        codec = stream.codec_context.name
        if codec not in NVDEC_CODECS:
            raise DeviceError(f"NVDEC decodes {', '.join(NVDEC_CODECS)}; this stream is {codec} "
                              "(decode it on the CPU)")
        context = stream.codec_context
        pix_fmt = context.pix_fmt or "unknown"
        if pix_fmt not in NV12_FORMATS:
            raise DeviceError(f"NVDEC output is converted for 8-bit 4:2:0 video; this stream is "
                              f"{pix_fmt} (decode it on the CPU)")
        if context.width % 2 or context.height % 2:
            raise DeviceError(f"NVDEC output is converted for even sizes; this stream is "
                              f"{context.width}x{context.height} (decode it on the CPU)")
        full = context.color_range == FULL_RANGE or pix_fmt == "yuvj420p"
        try:  # the stream's tags at open: a stream that changes them mid-way is not followed
            self.matrix = YuvMatrix.for_frames(context.colorspace, FULL_RANGE if full else 1)
        except ValueError as e:
            raise DeviceError(f"NVDEC output: {e} (decode it on the CPU)") from e
        self._nvc = nvc
        self._time_base: Fraction = stream.time_base or Fraction(1, 90_000)
        self._annexb = AnnexB(stream)
        self.stream = torch.cuda.Stream(device=self.device)
        options: dict[str, Any] = {
            "gpuid": spec.index, "codec": getattr(nvc.cudaVideoCodec, NVDEC_CODECS[codec]),
            # 0 = the device's primary context: the one torch uses, so DLPack and streams match
            "cudacontext": 0, "cudastream": self.stream.cuda_stream,
            "usedevicememory": True, "outputColorType": nvc.OutputColorType.NATIVE,
        }
        latency = getattr(nvc, "DisplayDecodeLatencyType", None)
        if latency is not None:
            options["latency"] = latency.LOW if low_latency else latency.NATIVE
        try:
            self._decoder: Any = nvc.CreateDecoder(**options)
        except Exception as e:  # the binding raises its own types (PyNvVCException, ...)
            raise DeviceError(f"NVDEC cannot decode this {codec} stream on {spec}: {e}") from e
        flag = getattr(getattr(nvc, "VideoPacketFlag", None), "ENDOFPICTURE", 0)
        self._end_of_picture = int(flag)  # each demuxed packet holds a whole picture
        self.size = (stream.codec_context.width, stream.codec_context.height)

    def decode(self, packet: av.Packet | None) -> list[DecodedPicture]:
        """The pictures this packet completes; ``None`` or an empty packet flushes."""
        if self._decoder is None:
            raise DecodeError("NVDEC decoder is closed")
        flush = packet is None or packet.size == 0
        where = "flush" if flush else f"packet at pts {packet.pts if packet else None}"
        try:
            payloads = self._annexb.payloads(packet)
            frames = [f for data, pts in payloads for f in self._decode_payload(data, pts)]
            if flush:
                frames += self._decode_payload(b"", None)  # empty payload = end of stream
        except DecodeError:
            raise
        except Exception as e:  # PyNvVCException, av.FFmpegError from the bitstream filter
            raise DecodeError(f"{where} could not be decoded on NVDEC: {e}") from e
        return self._pictures(frames)

    def _decode_payload(self, data: bytes, pts: int | None) -> list[Any]:
        packet = self._nvc.PacketData()
        buffer = np.frombuffer(data, dtype=np.uint8)  # no copy; alive until Decode returns
        packet.bsl_data = int(buffer.ctypes.data) if data else 0
        packet.bsl = len(data)
        packet.pts = -1 if pts is None else int(pts)
        packet.decode_flag = self._end_of_picture if data else 0
        return list(self._decoder.Decode(packet))  # the parser reads the buffer before returning

    def _pictures(self, frames: list[Any]) -> list[DecodedPicture]:
        if not frames:
            return []
        images = []
        with torch.cuda.stream(self.stream):
            for frame in frames:
                surface = torch.from_dlpack(frame)  # a view of the decoder's surface
                images.append((rgb_image(surface, self.size, self.matrix),
                               int(frame.getPTS())))
        ready = record_ready(self.stream)
        base = self._time_base
        return [DecodedPicture(image, None if pts < 0 else float(pts * base), ready=ready)
                for image, pts in images]

    def close(self) -> None:
        """Release the NVDEC session after the work queued on its stream. Idempotent."""
        if self._decoder is not None:
            self.stream.synchronize()
            self._decoder = None


def rgb_image(surface: torch.Tensor, size: tuple[int, int],
              matrix: YuvMatrix = UNTAGGED) -> torch.Tensor:
    """A decoder surface as a new (H, W, 3) uint8 RGB tensor of its own.

    NV12 ((rows, W) or with a trailing 1; the chroma rows start after the luma rows, which a
    decoder may pad to its alignment) is converted with ``matrix``; RGB (H, W, 3) and planar
    RGB (3, H, W), which a decoder set to convert itself hands out, are copied.
    """
    width, height = size
    if surface.ndim == 3 and surface.shape[2] == 3:
        return surface.clone(memory_format=torch.contiguous_format)
    if surface.ndim == 3 and surface.shape[0] == 3:
        return surface.permute(1, 2, 0).contiguous()
    nv12 = surface.squeeze(-1) if surface.ndim == 3 and surface.shape[2] == 1 else surface
    rows = nv12.shape[0] if nv12.ndim == 2 else 0
    luma_rows = rows * 2 // 3
    if nv12.ndim == 2 and nv12.dtype == torch.uint8 and nv12.shape[1] >= width \
            and luma_rows >= height and luma_rows + (height + 1) // 2 <= rows:
        return nv12_to_rgb(nv12, height, width, matrix, chroma_row=luma_rows)
    raise DecodeError(f"NVDEC surface of shape {tuple(surface.shape)} ({surface.dtype}) is "
                      f"neither RGB nor NV12 for a {width}x{height} picture")
