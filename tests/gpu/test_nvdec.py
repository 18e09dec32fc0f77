"""NVDEC decoding: the Annex-B stream it is fed, the surfaces it hands out, and (on a GPU)
every frame of synthetic clips decoded to FFmpeg's very pixels."""

from __future__ import annotations

from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch

from pipelines.cuda import library_available
from pipelines.decode.nvdec import AnnexB, NvdecDecoder, rgb_image
from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.yuv import YuvMatrix, nv12_to_rgb
from pipelines.errors import DecodeError, DeviceError
from pipelines.sources.file import FileSource
from pipelines.synthetic.rectangles import make_test_clip
from tests.gpu.agreement import need

START_CODES = (b"\x00\x00\x00\x01", b"\x00\x00\x01")


def ffmpeg_pictures(path):
    with FileSource(path, "ref") as source:
        decoder = PyAVDecoder(source.video)
        return [p for packet in source.packets() for p in decoder.decode(packet)]


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_annexb_payloads_decode_on_their_own(media, codec):
    """What NVDEC is fed is a self-contained Annex-B stream: a decoder with no extradata
    decodes it to the very frames FFmpeg decodes from the MP4."""
    clip = make_test_clip(media / f"annexb-{codec}.mp4", frames=24, size=(160, 96), codec=codec)
    expected = ffmpeg_pictures(clip)
    bare = av.CodecContext.create(codec, "r")
    got = []
    with FileSource(clip, "s") as source:
        annexb = AnnexB(source.video)
        for packet in source.packets():
            for data, _ in annexb.payloads(packet):
                assert data.startswith(START_CODES)
                got += bare.decode(av.Packet(data))
    got += bare.decode(None)
    assert len(got) == len(expected) == 24
    for frame, picture in zip(got, expected, strict=True):
        assert np.array_equal(frame.to_ndarray(format="rgb24"), picture.image)


def test_annexb_puts_sdp_parameter_sets_before_the_first_packet():
    """An RTSP stream is Annex B already; its SPS/PPS arrive in the SDP (extradata)."""
    sps_pps = b"\x00\x00\x00\x01\x67\x42\x00\x1e\x00\x00\x00\x01\x68\xce\x3c\x80"
    stream = SimpleNamespace(codec_context=SimpleNamespace(name="h264", extradata=sps_pps))
    annexb = AnnexB(stream)  # type: ignore[arg-type]

    class Packet(bytes):
        pts = 0

        @property
        def size(self):
            return len(self)

    first = annexb.payloads(Packet(b"\x00\x00\x00\x01\x65\x88"))
    second = annexb.payloads(Packet(b"\x00\x00\x00\x01\x41\x9a"))
    assert first == [(sps_pps + b"\x00\x00\x00\x01\x65\x88", 0)]
    assert second == [(b"\x00\x00\x00\x01\x41\x9a", 0)]


@pytest.mark.parametrize("size", [(64, 48), (96, 34), (33, 17)])
def test_a_padded_nv12_surface_converts_as_a_tight_one(size):
    """A decoder may pad the luma rows to its alignment and each row to its pitch: the
    chroma rows are found after the padding, and the picture is the same."""
    width, height = size
    chroma_h, chroma_w = (height + 1) // 2, (width + 1) // 2
    rng = np.random.default_rng(width)
    tight = torch.from_numpy(rng.integers(0, 256, (height + chroma_h, chroma_w * 2),
                                          dtype=np.uint8))
    aligned = -(-height // 16) * 16
    padded = torch.zeros(aligned * 3 // 2, 128, dtype=torch.uint8)
    padded[:height, :chroma_w * 2] = tight[:height]
    padded[aligned:aligned + chroma_h, :chroma_w * 2] = tight[height:]
    expected = nv12_to_rgb(tight, height, width, YuvMatrix.for_frames(1, 1))
    got = rgb_image(padded, size, YuvMatrix.for_frames(1, 1))
    assert got.shape == (height, width, 3) and torch.equal(got, expected)


def test_surfaces_of_every_layout_become_hwc_rgb():
    hwc = torch.arange(2 * 4 * 3, dtype=torch.uint8).reshape(2, 4, 3)
    assert torch.equal(rgb_image(hwc, (4, 2)), hwc)
    assert rgb_image(hwc, (4, 2)).data_ptr() != hwc.data_ptr()  # the surface is recycled
    assert torch.equal(rgb_image(hwc.permute(2, 0, 1), (4, 2)), hwc)
    nv12 = torch.full((6, 4), 128, dtype=torch.uint8)
    assert rgb_image(nv12[..., None], (4, 4)).shape == (4, 4, 3)
    with pytest.raises(DecodeError, match="neither RGB nor NV12"):
        rgb_image(torch.zeros(5, 5, dtype=torch.uint8), (4, 4))


def test_without_pynvvideocodec_the_decoder_names_it(small_clip):
    if library_available("PyNvVideoCodec"):
        pytest.skip("PyNvVideoCodec is installed")
    with FileSource(small_clip, "s") as source, \
            pytest.raises(DeviceError, match="pynvvideocodec"):
        NvdecDecoder(source.video, "cuda:0")


def nvdec_pictures(clip, cuda):
    pictures = []
    with FileSource(clip, "s") as source:
        decoder = NvdecDecoder(source.video, str(cuda))
        for packet in source.packets():
            pictures += decoder.decode(packet)
        decoder.close()
    return pictures


# (codec, (width, height), (colour space, range)): untagged, as cameras tag (BT.709), full range
NVDEC_CASES = [("h264", (320, 240), None), ("hevc", (320, 240), None),
               ("h264", (1280, 720), (1, 1)), ("h264", (1920, 1080), None),
               ("h264", (854, 480), (2, 2))]


@pytest.mark.gpu
@pytest.mark.parametrize("case", NVDEC_CASES, ids=lambda c: f"{c[0]}-{c[1][0]}x{c[1][1]}-{c[2]}")
def test_nvdec_pictures_equal_ffmpeg_s_every_pixel(media, cuda, case):
    """The GPU path's pictures are the CPU path's: NVDEC's samples converted as FFmpeg converts
    them (pipelines/decode/yuv.py), for every frame, size and colour tag."""
    need("PyNvVideoCodec")
    codec, size, colour = case
    width, height = size
    clip = make_test_clip(media / f"nvdec-{codec}-{width}-{colour}.mp4", frames=12, size=size,
                          codec=codec, colour=colour)
    expected = ffmpeg_pictures(clip)
    pictures = nvdec_pictures(clip, cuda)
    assert len(pictures) == len(expected) == 12
    for index, (picture, reference) in enumerate(zip(pictures, expected, strict=True)):
        picture.ready.synchronize()
        assert picture.image.is_cuda and picture.image.shape == (height, width, 3)
        assert picture.pts == pytest.approx(reference.pts)
        diff = np.abs(picture.image.cpu().numpy().astype(int) - reference.image.astype(int))
        assert diff.max() == 0, (f"frame {index}: {(diff > 0).mean():.2%} of the values differ, "
                                 f"mean {diff.mean():.3f}, max {diff.max()}")


@pytest.mark.gpu
def test_nvdec_refuses_video_it_does_not_convert(media, cuda):
    """4:4:4 (and 10-bit) video is not NV12: refused at open, so the CPU decodes it."""
    need("PyNvVideoCodec")
    clip = media / "nvdec-444.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv444p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with FileSource(clip, "s") as source, pytest.raises(DeviceError, match="yuv444p"):
        NvdecDecoder(source.video, str(cuda))


@pytest.mark.gpu
def test_nvdec_refuses_codecs_it_does_not_decode(media, cuda):
    need("PyNvVideoCodec")
    clip = make_test_clip(media / "nvdec-mpeg4.mp4", frames=3, size=(64, 48), codec="mpeg4")
    with FileSource(clip, "s") as source, pytest.raises(DeviceError, match="mpeg4"):
        NvdecDecoder(source.video, str(cuda))
