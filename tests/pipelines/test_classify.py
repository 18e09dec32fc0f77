"""Classifiers on tracked objects (issue 37): when a track is classified, its answers on the
results, a line that counts only what the classifier said, and the crops batched across
streams — with the shipped classifier on rendered pictures."""

from dataclasses import replace

import numpy as np
import pytest

from models.scene import Scene, SceneObject, render
from models.shapes import CLASSES
from models.zoo import resolve_model
from pipelines.analytics.config import AnalyticsConfig, LineConfig, TrackerSettings, from_flags
from pipelines.analytics.stage import AnalyticsStage
from pipelines.analytics.stream import StreamAnalytics
from pipelines.channel import Channel
from pipelines.classify.config import ClassifierConfig, parse_classify
from pipelines.classify.model import Classifiers
from pipelines.classify.tracks import TrackAttributes
from pipelines.errors import ConfigError
from pipelines.frame import Detections, Frame, Result
from pipelines.metrics import PipelineMetrics
from pipelines.sinks.jsonl import detection_record

SIZE = (640, 384)
SPEC = resolve_model("shapes-yolo")[1]
PATTERN = ClassifierConfig(model="shapes-pattern")


def _shape(y: float, pattern: int, colour: tuple[int, int, int]) -> SceneObject:
    """A disc 70 px across moving right 12 px a frame from x = 150, across x = 320."""
    return SceneObject(class_id=0, centre=(150, y), velocity=(12, 0), radius=35, aspect=1.0,
                       angle=0.3, spin=0.0, form=0.6, colour=colour, second=(20, 20, 20),
                       pattern=pattern, exposure=0.0, path=((0, 150, y), (30, 510, y)))


def _frames(count: int = 30) -> list[tuple[np.ndarray, np.ndarray]]:
    """A striped disc above a solid one, both crossing the middle; the truth boxes."""
    background = np.full((SIZE[1] + 20, SIZE[0] + 20, 3), 90, np.uint8)
    from models.scene import Lighting

    light = Lighting(1.0, 0.0, 100.0, (0.0, 0.0), (1.0, 1.0, 1.0), 0.0)
    scene = Scene(SIZE, background, (0.0, 0.0), (_shape(100, 2, (230, 200, 40)),
                                                 _shape(280, 0, (40, 160, 230))), light)
    out = []
    for t in range(count):
        image, truth = render(scene, float(t))
        out.append((image, truth.boxes))
    return out


def _stage(config: AnalyticsConfig, streams=("s",)) -> tuple[AnalyticsStage, Classifiers,
                                                             PipelineMetrics]:
    metrics = PipelineMetrics()
    classifiers = Classifiers()
    analytics = {sid: StreamAnalytics(sid, config, SPEC, 30.0, metrics, classifiers)
                 for sid in streams}
    stage = AnalyticsStage(analytics, Channel("in", 4), Channel("out", 4), metrics,
                           keep_images=True, classifiers=classifiers)
    return stage, classifiers, metrics


def _result(sid: str, index: int, image: np.ndarray, boxes: np.ndarray) -> Result:
    d = Detections(boxes[:, :4].astype(np.float32), np.full(len(boxes), 0.9, np.float32),
                   boxes[:, 4].astype(np.int32))
    return Result(Frame(sid, index, index / 30, 0.0, image), d)


def test_a_line_counts_only_what_the_classifier_said_and_results_carry_the_answers():
    config = AnalyticsConfig(track=TrackerSettings(), classifiers=[PATTERN], lines=[
        LineConfig(name="all", points=(320, 0, 320, 384)),
        LineConfig(name="striped", points=(320, 0, 320, 384),
                   attributes={"pattern": ["striped"]})])
    stage, classifiers, metrics = _stage(config)
    with stage:
        results = [r for k, (image, boxes) in enumerate(_frames())
                   for r in stage.process([_result("s", k, image, boxes)])]
        (loaded,) = classifiers.loaded.values()
    last = results[-1]
    assert last.analytics["lines"]["all"] == {"in": 2, "out": 0}
    assert last.analytics["lines"]["striped"] == {"in": 1, "out": 0}
    answers = {tid: a["pattern"][0] for tid, a in last.attributes.items()}
    by_y = sorted(zip(last.detections.xyxy[:, 1].tolist(), last.detections.track_id.tolist(),
                      strict=True))
    assert [answers[tid] for _, tid in by_y] == ["striped", "solid"]
    line = detection_record(last, SPEC)
    assert {d["attributes"]["pattern"][0] for d in line["detections"]} == {"striped", "solid"}
    # once per track: two crops for two tracks over 30 frames (nothing got much better)
    assert loaded.crops == 2
    assert classifiers.closed  # with the stage
    text = metrics.registry.get_sample_value(
        "vidpipe_classifications_total", {"stream": "s", "classifier": "shapes-pattern",
                                          "head": "pattern", "label": "striped"})
    assert text == 1.0


def test_crops_of_several_streams_go_to_the_model_in_one_call():
    config = AnalyticsConfig(track=TrackerSettings(), classifiers=[PATTERN])
    stage, classifiers, _ = _stage(config, streams=("a", "b", "c"))
    frames = _frames(3)
    with stage:
        for k, (image, boxes) in enumerate(frames):
            stage.process([_result(sid, k, image, boxes) for sid in ("a", "b", "c")])
        (loaded,) = classifiers.loaded.values()
        # frame 0: no confirmed track; frame 1: six tracks of three streams, one call
        assert (loaded.calls, loaded.crops) == (1, 6)


def test_a_track_is_classified_again_only_when_its_picture_got_better_and_time_passed():
    classifiers = Classifiers()
    try:
        loaded = classifiers.get(ClassifierConfig(model="shapes-pattern", reclassify_s=1.0,
                                                  better=0.25))
        attributes = TrackAttributes([(ClassifierConfig(model="shapes-pattern",
                                                        reclassify_s=1.0, better=0.25),
                                       loaded, None)])

        def boxes(side: float) -> Detections:
            return Detections(np.array([[0, 0, side, side]], np.float32),
                              np.array([0.9], np.float32), np.array([0]), np.array([7]))

        def ask(side: float, now: float) -> bool:
            requests = attributes.wanted(boxes(side), now)
            for request in requests:
                attributes.record(request, [{"pattern": ("solid", 0.9)}])
            return bool(requests)

        assert ask(40, 0.0)  # confirmed: classified at once
        assert not ask(60, 0.5)  # better, too soon
        assert not ask(42, 1.5)  # time passed, not 25 % better
        assert ask(60, 1.5)  # both
        assert attributes.of(np.array([7, -1, 3])) == {7: {"pattern": ("solid", 0.9)}}
    finally:
        classifiers.close()


def test_a_classifier_runs_only_on_the_detector_classes_named():
    config = AnalyticsConfig(track=TrackerSettings(), classifiers=[
        PATTERN.model_copy(update={"objects": ["box"]})])
    stage, classifiers, _ = _stage(config)
    with stage:
        for k, (image, boxes) in enumerate(_frames(3)):  # discs only
            stage.process([_result("s", k, image, boxes)])
        assert next(iter(classifiers.loaded.values())).crops == 0
    assert CLASSES[0] == "disc"


@pytest.mark.parametrize("config, message", [
    (dict(lines=[LineConfig(name="l", points=(0, 0, 1, 1), attributes={"colour": ["red"]})]),
     "line l counts colour=red, but its classifiers answer pattern"),
    (dict(zones=[{"name": "z", "polygon": [(0, 0), (1, 0), (1, 1)],
                  "attributes": {"pattern": ["plaid"]}}]), "zone z counts pattern=plaid"),
    (dict(classifiers=[PATTERN, PATTERN.model_copy(update={"reclassify_s": 5.0})]),
     "two classifiers answer as 'pattern'"),
])
def test_a_filter_nothing_could_pass_or_two_heads_of_one_name_are_refused(config, message):
    values = {"track": TrackerSettings(), "classifiers": [PATTERN]} | config
    classifiers = Classifiers()
    try:
        with pytest.raises(ConfigError, match=message):
            StreamAnalytics("s", AnalyticsConfig(**values), SPEC, 30.0, None, classifiers)
    finally:
        classifiers.close()


def test_the_flags_build_classifiers_and_filters_and_say_what_is_wrong():
    config = from_flags(None, ["gate=320,0,320,384;pattern=striped,shaded"],
                        ["z=0,0,10,0,10,10;pattern=solid"],
                        classify=["shapes-pattern;reclassify_s=5;objects=disc,box"])
    assert config is not None and config.track is not None  # a classifier implies a tracker
    assert config.lines[0].attributes == {"pattern": ["striped", "shaded"]}
    assert config.zones[0].attributes == {"pattern": ["solid"]}
    assert config.classifiers[0].reclassify_s == 5.0
    assert config.classifiers[0].objects == ["disc", "box"]
    with pytest.raises(ConfigError, match="reclassify_s must be a number"):
        parse_classify("shapes-pattern;reclassify_s=soon")
    with pytest.raises(ConfigError, match="expected MODEL"):
        parse_classify("shapes-pattern;imagenet")
    with pytest.raises(ConfigError, match="format"):
        parse_classify("mine.onnx;format=tflite")
    with pytest.raises(ConfigError, match="HEAD=LABEL"):
        from_flags(None, ["gate=0,0,1,1;striped"], [])


def test_without_a_picture_nothing_is_classified_and_counting_goes_on():
    """A result whose picture was released (no full picture kept) is tracked and counted;
    the classifier is not asked."""
    config = AnalyticsConfig(track=TrackerSettings(), classifiers=[PATTERN])
    stage, classifiers, _ = _stage(config)
    with stage:
        for k, (image, boxes) in enumerate(_frames(3)):
            result = _result("s", k, image, boxes)
            stage.process([replace(result, frame=replace(result.frame, image=None))])
        assert next(iter(classifiers.loaded.values())).crops == 0


def test_the_answers_are_drawn_with_the_box():
    from pipelines.sinks.video import draw_detections

    image, boxes = _frames(1)[0]
    d = _result("s", 0, image, boxes).detections
    d = Detections(d.xyxy, d.score, d.class_id, np.array([4, 5]))
    plain = draw_detections(image, d, SPEC)
    said = draw_detections(image, d, SPEC, {4: {"pattern": ("striped", 0.9)}})
    changed = np.argwhere((plain != said).any(axis=2))
    # only beside track 4's box, where its label runs on
    assert len(changed) and changed[:, 0].max() < d.xyxy[0, 3]
