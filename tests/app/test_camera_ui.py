"""The camera UI (cameras.html) and the review page (review.html) in Chromium, against the
real service playing a clip of moving shapes as a camera, with the shapes model and a tracker.

The test draws a line with the mouse on the live picture, as a user does, saves it, and
watches its counts rise; edits it by dragging an end; draws a zone and a mask by clicking
their corners; then reviews the line's crossings. Screenshots are kept in ``test-artifacts/``
(cameras-grid.png, cameras-live-line.png, review-by-line.png).
"""

import re
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tests.support.browser import (
    ARTIFACTS,
    chromium,
    free_port,
    get_json,
    open_page,
    send_json,
    serving,
)

pytestmark = pytest.mark.slow  # Chromium and a real service per module

browser = pytest.fixture(scope="module")(chromium)
SIZE = (320, 192)  # the clip's picture
LOCAL_ZONE = "Europe/Paris"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from models.tracking_data import make_tracking_clip

    tmp = tmp_path_factory.mktemp("cameras")
    lanes = make_tracking_clip(tmp / "lanes.mp4", clip=4, frames=90, size=SIZE)
    events = {"media_dir": str(tmp / "events"), "clips": {"pre_s": 0.5, "post_s": 0.5}}
    with serving(lanes, tmp, stream={"track": "bytetrack"}, model="shapes-yolo",
                 events=events) as (base, clip):
        send_json("POST", f"{base}/api/streams",
                  {"url": f"rtsp://127.0.0.1:{free_port()}/porch", "id": "porch"})
        yield base, clip


@pytest.fixture
def page(browser, service):
    # away from UTC, so the review's time range is read as the user's local time
    with open_page(browser, viewport={"width": 1280, "height": 900},
                   timezone_id=LOCAL_ZONE) as page:
        yield page


def _screen(page, testid, x, y):
    """Where the picture's pixel (x, y) is on the screen: the picture is drawn whole
    ("contain") in its box."""
    box = page.get_by_test_id(testid).bounding_box()
    scale = min(box["width"] / SIZE[0], box["height"] / SIZE[1])
    left = box["x"] + (box["width"] - SIZE[0] * scale) / 2
    top = box["y"] + (box["height"] - SIZE[1] * scale) / 2
    return left + x * scale, top + y * scale


def _drag(page, start, end):
    page.mouse.move(*_screen(page, "live-overlay", *start))
    page.mouse.down()
    page.mouse.move(*_screen(page, "live-overlay", *end), steps=8)
    page.mouse.up()


def _clicks(page, points):
    for x, y in points:
        page.mouse.click(*_screen(page, "live-overlay", x, y))


def _line_count(page, name):
    text = page.get_by_test_id(f"count-line-{name}").inner_text()
    found = re.search(r"in (\d+)\s+out (\d+)", text)
    return int(found[1]) + int(found[2]) if found else 0


def test_the_grid_shows_every_camera_and_why_one_is_not_up(page, service):
    from playwright.sync_api import expect

    base, _ = service
    page.goto(f"{base}/cameras.html")
    expect(page.get_by_test_id("camera-cam-state")).to_have_text("up", timeout=10_000)
    expect(page.get_by_test_id("camera-cam-snapshot")).to_have_attribute(
        "data-loaded", "true", timeout=10_000)
    expect(page.get_by_test_id("camera-porch-state")).to_have_text("unreachable",
                                                                    timeout=15_000)
    expect(page.get_by_test_id("camera-porch-why")).to_contain_text(
        re.compile(r"connection refused: nothing listens on that port \(\d+ attempts"))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "cameras-grid.png"))
    assert page.errors == [], page.errors


def test_a_line_drawn_with_the_mouse_counts_and_its_crossings_are_reviewed(page, service):
    """Issue 34, item 4: the acceptance's screenshots (a live view with a line drawn with the
    mouse and its counts rising; the review page filtered by that line)."""
    from playwright.sync_api import expect

    base, _ = service
    page.goto(f"{base}/cameras.html")
    page.get_by_test_id("camera-cam").click()
    expect(page.get_by_test_id("live")).to_be_visible()
    expect(page.get_by_test_id("live-picture")).to_have_attribute("data-loaded", "true",
                                                                  timeout=10_000)
    assert page.url.endswith("#cam")

    page.get_by_test_id("shape-name").fill("gate")
    page.get_by_test_id("tool-line").click()
    _drag(page, (160, 4), (160, 188))
    expect(page.get_by_test_id("shape-gate")).to_be_visible()
    expect(page.get_by_test_id("save-message")).to_have_text("not saved yet")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("save-message")).to_contain_text("saved: ", timeout=10_000)
    shown = get_json(f"{base}/api/streams/cam")["analytics"]["lines"]
    assert [(line["name"], line["points"]) for line in shown] == [("gate", [160, 4, 160, 188])]

    # its counts rise on the live view
    expect(page.get_by_test_id("count-line-gate")).to_contain_text(
        re.compile(r"in \d+\s*out \d+"), timeout=5_000)
    deadline = time.monotonic() + 30
    while _line_count(page, "gate") < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    first = _line_count(page, "gate")
    assert first >= 2, "no crossings counted on the line drawn"
    while _line_count(page, "gate") <= first and time.monotonic() < deadline + 15:
        time.sleep(0.5)
    assert _line_count(page, "gate") > first, "the counts did not rise"
    print(f"line gate drawn with the mouse: {first} crossings counted, then "
          f"{_line_count(page, 'gate')}")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "cameras-live-line.png"))

    # edited with the mouse: its lower end dragged left; a zone and a mask clicked out
    _drag(page, (160, 188), (150, 188))
    page.get_by_test_id("shape-name").fill("yard")
    page.get_by_test_id("tool-zone").click()
    _clicks(page, [(20, 100), (120, 100), (120, 180), (20, 180), (20, 100)])
    page.get_by_test_id("tool-mask").click()  # named mask1 by itself
    _clicks(page, [(250, 10), (310, 10)])
    page.mouse.dblclick(*_screen(page, "live-overlay", 310, 40))  # closes it
    page.get_by_test_id("tool-mask").click()  # mask2
    _clicks(page, [(200, 150), (240, 150), (240, 180)])
    page.keyboard.press("Enter")  # closes it too
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("save-message")).to_contain_text("saved: ", timeout=10_000)
    stream = get_json(f"{base}/api/streams/cam")
    assert stream["analytics"]["lines"][0]["points"] == [160, 4, 150, 188]
    assert [(z["name"], z["polygon"]) for z in stream["analytics"]["zones"]] == [
        ("yard", [[20, 100], [120, 100], [120, 180], [20, 180]])]
    assert [(m["name"], m["polygon"]) for m in stream["masks"]] == [
        ("mask1", [[250, 10], [310, 10], [310, 40]]),
        ("mask2", [[200, 150], [240, 150], [240, 180]])]
    expect(page.get_by_test_id("count-zone-yard")).to_contain_text("in now")

    # the review page, filtered by the line: its crossings, newest first, a page at a time
    page.goto(f"{base}/review.html")
    page.get_by_test_id("filter-line").fill("gate")
    page.get_by_test_id("filter-apply").click()
    rows = page.locator("#review li[data-type]")
    expect(rows.first).to_contain_text("line gate", timeout=5_000)
    assert "line=gate" in page.url
    types = rows.evaluate_all("rows => rows.map(r => r.dataset.type)")
    texts = rows.all_inner_texts()
    times = rows.evaluate_all("rows => rows.map(r => r.dataset.time)")
    assert set(types) == {"line_cross"} and all("line gate" in t for t in texts)
    assert times == sorted(times, reverse=True)
    page.screenshot(path=str(ARTIFACTS / "review-by-line.png"))
    print(f"review filtered by line gate: {len(types)} events, all line_cross of gate")
    assert page.errors == [], page.errors


def test_the_review_pages_through_events_and_plays_a_clip(page, service):
    from playwright.sync_api import expect

    base, _ = service
    # objects end all the time on this clip: more than a page of them soon
    deadline = time.monotonic() + 60
    while len(get_json(f"{base}/api/events/recent?type=end&limit=30")["events"]) < 30:
        assert time.monotonic() < deadline, "fewer than 30 objects ended in a minute"
        time.sleep(1)
    page.goto(f"{base}/review.html?type=end&stream=cam")
    rows = page.locator("#review li[data-type]")
    expect(rows).to_have_count(25, timeout=5_000)
    expect(page.get_by_test_id("filter-type")).to_have_value("end")
    first_page = rows.evaluate_all("rows => rows.map(r => r.dataset.time)")
    page.get_by_test_id("older").click()
    expect(page.get_by_test_id("page-info")).to_contain_text("page 2")
    second_page = rows.evaluate_all("rows => rows.map(r => r.dataset.time)")
    assert second_page and max(second_page) <= min(first_page)

    # a time range, typed in local time (Paris), sent as UTC
    cut = datetime.fromisoformat(first_page[10].replace("Z", "+00:00")).replace(microsecond=0)
    since = cut.astimezone(ZoneInfo(LOCAL_ZONE)).strftime("%Y-%m-%dT%H:%M:%S")
    page.goto(f"{base}/review.html?type=end&stream=cam&since={since}")
    shown = since.removesuffix(":00")  # the browser's value drops a minute's :00 seconds
    expect(page.get_by_test_id("filter-since")).to_have_value(shown)
    expect(page.get_by_test_id("page-info")).to_contain_text(f"since {since}")
    ranged = rows.evaluate_all("rows => rows.map(r => r.dataset.time)")

    def utc(text):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    older = {t for t in first_page + second_page if utc(t) < cut}
    assert ranged and older and not older & set(ranged)
    assert min(utc(t) for t in ranged) >= cut

    # "all" leaves out the objects' updates, which would bury everything else
    assert "update" in {e["type"] for e in get_json(f"{base}/api/events/recent?limit=200")[
        "events"]}
    page.goto(f"{base}/review.html?stream=cam")
    expect(rows.first).to_be_visible(timeout=5_000)
    assert "update" not in rows.evaluate_all("rows => rows.map(r => r.dataset.type)")

    page.goto(f"{base}/review.html?type=end&stream=cam")
    row = rows.first
    expect(row.locator("img")).to_have_attribute("data-loaded", "true", timeout=5_000)
    row.locator("button").click()
    video = row.locator("video")
    expect(video).to_be_visible(timeout=5_000)
    page.wait_for_function("v => v.readyState >= 1 && v.duration > 0",
                           arg=video.element_handle(), timeout=10_000)
    assert video.evaluate("v => v.seekable.start(0)") == 0.0
    assert page.errors == [], page.errors


def _add(page, said: str) -> None:
    """Submits the add form until it says ``said``. A machine that holds no more cameras
    (a slow one: the service's one camera took 0.9 of a core on CI's AMD EPYC) refuses the
    camera (409) and the form offers to add it anyway: ticked and submitted again, as a
    user told so would."""
    from playwright.sync_api import expect

    form, message = page.get_by_test_id("add-camera"), page.get_by_test_id("add-message")
    form.get_by_test_id("add-submit").click()
    full = "one more would slow every camera down; add it with force to run it anyway"
    expect(message).to_have_text(re.compile(f"^({re.escape(said)}|.*{re.escape(full)})$"),
                                 timeout=10_000)
    if message.inner_text() != said:
        form.get_by_test_id("add-force").check()
        form.get_by_test_id("add-submit").click()
    expect(message).to_have_text(said, timeout=10_000)


def test_the_add_form_takes_a_tracker_lines_and_zones(page, service):
    from playwright.sync_api import expect

    base, clip = service
    page.goto(f"{base}/cameras.html")
    form = page.get_by_test_id("add-camera")
    form.get_by_test_id("add-url").fill(str(clip))
    form.get_by_test_id("add-id").fill("side")
    form.get_by_test_id("add-track").select_option("botsort")
    form.get_by_test_id("add-lines").fill("door=0,96,320,96")
    form.get_by_test_id("add-zones").fill("bad=1,2,3")
    form.get_by_test_id("add-submit").click()
    expect(page.get_by_test_id("add-message")).to_contain_text("needs 3 or more x,y points")
    form.get_by_test_id("add-zones").fill("porch=0,0,100,0,100,100")
    _add(page, "added side: it is remembered across restarts")
    expect(page.get_by_test_id("camera-side")).to_be_visible(timeout=5_000)
    analytics = get_json(f"{base}/api/streams/side")["analytics"]
    assert analytics["track"] == "botsort"
    assert [line["name"] for line in analytics["lines"]] == ["door"]
    assert [zone["name"] for zone in analytics["zones"]] == ["porch"]
    expect(page.get_by_test_id("camera-side-counts")).to_contain_text("door in")
    # removed from its live view, two clicks (a stray one does not stop a camera)
    page.get_by_test_id("camera-side").click()
    page.get_by_test_id("live-remove").click()
    expect(page.get_by_test_id("live-remove")).to_have_text("Confirm: remove side")
    page.get_by_test_id("live-remove").click()
    expect(page.get_by_test_id("camera-side")).to_have_count(0, timeout=10_000)
    expect(page.get_by_test_id("live")).to_be_hidden()
    assert "side" not in [s["id"] for s in get_json(f"{base}/api/streams")]

    # lines without a tracker: one is implied, and the form says which
    form.get_by_test_id("add-url").fill(str(clip))
    form.get_by_test_id("add-id").fill("implied")
    form.get_by_test_id("add-lines").fill("door=0,96,320,96")
    _add(page, "added implied (tracked with botsort: lines and zones count tracks): it is "
               "remembered across restarts")
    send_json("DELETE", f"{base}/api/streams/implied", None)
    assert page.errors == [], page.errors


def test_the_live_view_shows_where_tracked_objects_were(page, service):
    """Issue 36, item 5: the heatmap on the camera UI, in place of the live picture, and
    back."""
    from playwright.sync_api import expect

    base, _ = service
    page.goto(f"{base}/cameras.html#cam")
    picture = page.get_by_test_id("live-picture")
    expect(picture).to_have_attribute("data-loaded", "true", timeout=10_000)
    page.get_by_test_id("live-heatmap").click()
    expect(page.get_by_test_id("live-heatmap")).to_have_attribute("aria-pressed", "true")
    expect(picture).to_have_attribute("data-loaded", "true", timeout=10_000)
    assert page.evaluate("() => [document.getElementById('live-picture').naturalWidth, "
                         "document.getElementById('live-picture').naturalHeight]") == list(SIZE)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "cameras-heatmap.png"))
    page.get_by_test_id("live-heatmap").click()
    expect(page.get_by_test_id("live-heatmap")).to_have_text("Heatmap")
    expect(picture).to_have_attribute("data-loaded", "true", timeout=10_000)
    assert page.errors == [], page.errors
