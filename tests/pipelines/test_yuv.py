"""The GPU path's colour conversion (pipelines/decode/yuv.py) against the CPU path's: NVDEC hands
out the decoded Y, U and V samples, and the picture the model sees must be the very one FFmpeg
gives the CPU path. Here the samples come from FFmpeg's own decode, so any difference is the
conversion's."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch

from pipelines.decode.pyav import PyAVDecoder
from pipelines.decode.yuv import YuvMatrix, nv12_to_rgb
from pipelines.sources.file import FileSource
from pipelines.synthetic.rectangles import make_test_clip

# (AVColorSpace, AVColorRange): untagged, BT.709 as cameras tag it, full range (JPEG-style),
# each other matrix swscale converts, and "reserved" (3)
TAGS = [(2, 0), (1, 1), (1, 2), (2, 2), (5, 1), (6, 1), (4, 1), (7, 1), (9, 1), (9, 2), (3, 1)]


def nv12_of(frame: av.VideoFrame) -> np.ndarray:
    """The frame's 4:2:0 planes as one NV12 array (what NVDEC hands out), read as decoded."""
    def plane(index: int, height: int, width: int) -> np.ndarray:
        data = frame.planes[index]
        rows = np.frombuffer(memoryview(data), np.uint8).reshape(-1, data.line_size)
        return rows[:height, :width]

    height, width = frame.height, frame.width
    chroma_h, chroma_w = (height + 1) // 2, (width + 1) // 2
    uv = np.stack([plane(1, chroma_h, chroma_w), plane(2, chroma_h, chroma_w)], axis=-1)
    return np.concatenate([plane(0, height, width), uv.reshape(chroma_h, chroma_w * 2)])


def cpu_pictures_and_nv12(clip):
    """The CPU path's pictures of ``clip``, its frames' NV12 planes, and the matrix its
    stream's tags name."""
    with FileSource(clip, "s") as source:
        decoder = PyAVDecoder(source.video)
        context = source.video.codec_context
        matrix = YuvMatrix.for_frames(context.colorspace, context.color_range)
        pictures = [p for packet in source.packets() for p in decoder.decode(packet)]
    with av.open(str(clip)) as container:
        planes = [nv12_of(frame) for frame in container.decode(video=0)]
    return pictures, planes, matrix


def assert_converts_exactly(clip, size, frames):
    pictures, planes, matrix = cpu_pictures_and_nv12(clip)
    assert len(pictures) == len(planes) == frames
    width, height = size
    for picture, nv12 in zip(pictures, planes, strict=True):
        got = nv12_to_rgb(torch.from_numpy(nv12), height, width, matrix).numpy()
        diff = np.abs(got.astype(int) - picture.image.astype(int))
        assert diff.max() == 0, (f"{(diff > 0).mean():.2%} of the values differ, "
                                 f"by up to {diff.max()}")


@pytest.mark.parametrize("tag", TAGS, ids=lambda t: f"space{t[0]}-range{t[1]}")
def test_every_colour_tag_converts_to_the_cpu_path_s_pixels(media, tag):
    clip = make_test_clip(media / f"yuv-{tag[0]}-{tag[1]}.mp4", frames=3, size=(320, 240),
                          seed=5, colour=tag)
    assert_converts_exactly(clip, (320, 240), 3)


@pytest.mark.parametrize("size", [(1280, 720), (854, 480), (642, 362), (1920, 1080)])
def test_every_size_converts_to_the_cpu_path_s_pixels(media, size):
    """Camera sizes: a width that is no multiple of 16, a chroma plane of odd size."""
    clip = make_test_clip(media / f"yuv-{size[0]}.mp4", frames=2, size=size, seed=7,
                          colour=(1, 1))
    assert_converts_exactly(clip, size, 2)


def test_the_untagged_matrix_is_bt601_limited_range():
    assert YuvMatrix.for_frames(2, 0) == YuvMatrix.for_frames(6, 1) != YuvMatrix.for_frames(1, 1)


@pytest.mark.parametrize("space", [0, 8, 10, 12])
def test_a_colour_space_not_measured_equal_is_refused(space):
    """FFmpeg's CPU path refuses BT.2020 constant luminance (10), YCgCo (8) and 12 ("Operation
    not supported"), and converts 0 otherwise than its table reads (42-59 levels off): NVDEC
    leaves such streams to the CPU rather than guess."""
    with pytest.raises(ValueError, match=f"colour space {space} "):
        YuvMatrix.for_frames(space, 1)
