"""ShapesYOLO: the yolov8 layout the pipeline decodes, for every activation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.detector import ACTIVATIONS, STRIDE, DetectorConfig, ShapesYOLO, make_grid
from models.spec import OutputSpec
from pipelines.geometry import Letterbox
from pipelines.postprocess.yolo import decode_yolov8

SMALL = {"widths": (8, 8, 16, 16, 16), "depths": (0, 1, 1, 0), "neck_width": 8}


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_output_is_yolov8_rows_per_stride8_cell(activation: str) -> None:
    model = ShapesYOLO(DetectorConfig(num_classes=3, activation=activation, **SMALL)).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 320, 320))
    assert out.shape == (2, 4 + 3, (320 // STRIDE) ** 2)
    scores = out[:, 4:]
    assert ((scores > 0) & (scores < 1)).all()  # objectness x softmax, no objectness row
    torch.testing.assert_close(scores.sum(1), scores.sum(1).clamp(max=1.0))
    assert (out[:, 2:4] > 0).all()  # widths and heights


def test_boxes_are_centred_on_their_cells_at_initialisation() -> None:
    """The box head starts at zero, so every box sits on its cell's centre: the grid order
    must match the flattened feature map, or decoded boxes land on the wrong cells."""
    model = ShapesYOLO(DetectorConfig(num_classes=2, input_size=(64, 32), **SMALL)).eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 32, 64))
    centres = out[0, :2].T.numpy()
    assert centres[0].tolist() == [4.0, 4.0] and centres[1].tolist() == [12.0, 4.0]
    assert centres[8].tolist() == [4.0, 12.0]  # row-major: 8 cells per row at width 64
    np.testing.assert_array_equal(make_grid(64, 32)[0].T.numpy(), centres)


def test_pipeline_decoder_accepts_the_output() -> None:
    model = ShapesYOLO(DetectorConfig(num_classes=5, **SMALL)).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 320, 320)).numpy()
    out[:, 4:, 0] = 0.0
    out[0, 4 + 2, 0] = 0.9  # one confident class-2 box on the first cell of frame 0
    out[0, :4, 0] = [100.0, 120.0, 40.0, 20.0]
    boxes = [Letterbox.fit((640, 384), (320, 320)) for _ in range(2)]
    found = decode_yolov8(out, boxes, OutputSpec(format="yolov8", score_threshold=0.5), 5)
    assert len(found[0]) == 1 and len(found[1]) == 0
    assert found[0].class_id.tolist() == [2]
    # input (80..120, 110..130) -> source: x / 0.5, (y - 64 px of padding) / 0.5
    np.testing.assert_allclose(found[0].xyxy[0], [160, 92, 240, 132], atol=0.5)


def test_other_input_sizes_get_their_own_grid() -> None:
    model = ShapesYOLO(DetectorConfig(num_classes=1, **SMALL)).eval()
    with torch.no_grad():
        assert model(torch.rand(1, 3, 192, 320)).shape == (1, 5, 40 * 24)


@pytest.mark.parametrize("change, message", [
    ({"activation": "gelu"}, "activation"),
    ({"num_classes": 0}, "num_classes"),
    ({"input_size": (300, 300)}, "multiple of 32"),
    ({"class_names": ("a",)}, "class names"),
])
def test_bad_configs_are_refused(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DetectorConfig(**{"num_classes": 2, **change})


def test_config_round_trips_through_a_plain_dict() -> None:
    config = DetectorConfig(num_classes=2, class_names=("a", "b"), activation="silu")
    assert DetectorConfig.from_dict(config.to_dict()) == config
