"""NVDEC decoding: the Annex-B stream it is fed, the colour conversion, and (on a GPU) every
frame of a synthetic clip decoded close to FFmpeg's pixels."""

from __future__ import annotations

from types import SimpleNamespace

import av
import cv2
import numpy as np
import pytest
import torch

from pipelines.cuda import library_available
from pipelines.decode.nvdec import AnnexB, NvdecDecoder, nv12_to_rgb, rgb_image
from pipelines.decode.pyav import PyAVDecoder
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
def test_nv12_conversion_matches_opencv(size):
    width, height = size
    rng = np.random.default_rng(width)
    rgb = cv2.GaussianBlur(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), (0, 0), 2)
    even = rgb[: height // 2 * 2, : width // 2 * 2]
    yuv = cv2.cvtColor(even, cv2.COLOR_RGB2YUV_I420)  # planar 4:2:0, BT.601 limited
    h, w = even.shape[:2]
    flat = yuv.reshape(-1)
    y = flat[:h * w].reshape(h, w)
    u = flat[h * w:h * w * 5 // 4].reshape(h // 2, w // 2)
    v = flat[h * w * 5 // 4:].reshape(h // 2, w // 2)
    nv12 = np.concatenate([y, np.stack([u, v], -1).reshape(h // 2, w)])
    expected = cv2.cvtColor(nv12, cv2.COLOR_YUV2RGB_NV12)
    got = nv12_to_rgb(torch.from_numpy(nv12), h, w).numpy()
    assert got.shape == expected.shape
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2


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


@pytest.mark.gpu
@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_nvdec_decodes_every_frame_close_to_ffmpeg(media, cuda, codec):
    need("PyNvVideoCodec")
    clip = make_test_clip(media / f"nvdec-{codec}.mp4", frames=45, size=(320, 240), codec=codec)
    expected = ffmpeg_pictures(clip)
    pictures = []
    with FileSource(clip, "s") as source:
        decoder = NvdecDecoder(source.video, str(cuda))
        for packet in source.packets():
            pictures += decoder.decode(packet)
        decoder.close()
    assert len(pictures) == len(expected) == 45
    for picture, reference in zip(pictures, expected, strict=True):
        picture.ready.synchronize()
        assert picture.image.is_cuda and picture.image.shape == (240, 320, 3)
        assert picture.pts == pytest.approx(reference.pts)
        diff = np.abs(picture.image.cpu().numpy().astype(int) - reference.image.astype(int))
        # NVDEC and swscale differ in chroma upsampling and rounding, not in content
        assert diff.mean() < 3.0 and np.percentile(diff, 99) <= 24, (diff.mean(), diff.max())


@pytest.mark.gpu
def test_nvdec_refuses_codecs_it_does_not_decode(media, cuda):
    need("PyNvVideoCodec")
    clip = make_test_clip(media / "nvdec-mpeg4.mp4", frames=3, size=(64, 48), codec="mpeg4")
    with FileSource(clip, "s") as source, pytest.raises(DeviceError, match="mpeg4"):
        NvdecDecoder(source.video, str(cuda))
