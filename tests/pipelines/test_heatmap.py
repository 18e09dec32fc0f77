"""Issue 36, item 5: a stream's heatmap counts where its tracked objects' anchors were."""

import cv2
import numpy as np

from pipelines.analytics.heatmap import Heatmap


def test_anchors_count_in_their_cells_and_draw_over_the_picture():
    heatmap = Heatmap(cell=8)
    for _ in range(30):  # an object standing at (20, 20) for 30 frames
        heatmap.add(np.array([[20.0, 20.0]]))
    heatmap.add(np.array([[100.0, 60.0], [-5.0, 3.0]]))  # one passing; one off the picture
    assert heatmap.frames == 31
    background = np.full((80, 160, 3), 200, np.uint8)
    picture = heatmap.picture(background)
    assert picture.shape == background.shape
    assert (picture[0, 0] == (110, 110, 110)).all()  # never visited: the picture, dimmed
    stood, passed = picture[20, 20].astype(int), picture[60, 100].astype(int)
    assert stood[0] > stood[2] and passed[2] > passed[0]  # red where it stood, blue passing
    png = cv2.imdecode(np.frombuffer(heatmap.png(background), np.uint8), cv2.IMREAD_COLOR)
    assert png.shape == background.shape


def test_without_a_picture_it_draws_on_grey_of_the_size_given():
    heatmap = Heatmap()
    heatmap.add(np.array([[10.0, 10.0]]))
    assert heatmap.picture(size=(64, 48)).shape == (48, 64, 3)
