"""Issue 40, item 5: who may call each route, generated from the app (app/service/access.py),
checked in (docs/ACCESS.md), and held against what the service does: a route added without
the token dependency fails here until it has it, or a reason to be public."""

import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.service.access import render, route_access
from app.service.api import create_app
from app.service.config import ServiceConfig
from tests.support.api import LOCAL

TABLE = Path(__file__).resolve().parents[2] / "docs" / "ACCESS.md"
# a value each path parameter accepts
PARAMETERS = {"stream_id": "cam", "event_id": "0" * 32, "detector_id": "shapes-yolo@cpu"}


def test_the_checked_in_table_is_the_apps():
    rows = route_access(create_app(ServiceConfig(state_dir=None)))
    assert TABLE.read_text() == render(rows), (
        "docs/ACCESS.md is out of date: python -m app.service.access > docs/ACCESS.md")


def test_every_public_route_says_why():
    rows = route_access(create_app(ServiceConfig(state_dir=None)))
    assert [row.path for row in rows if not row.token and not row.reason] == []
    assert sum(row.token for row in rows) >= 14  # the data routes, not lost from the table


def test_each_route_is_as_the_table_says_with_a_token_set():
    app = create_app(ServiceConfig(state_dir=None, api_token="s3cret"))
    rows = route_access(app)
    with TestClient(app, base_url=LOCAL) as client:
        for row in rows:
            path = re.sub(r"\{(\w+)\}", lambda m: PARAMETERS[m[1]], row.path)
            for method in ("GET",) if row.methods == "*" else row.methods.split(", "):
                if method == "HEAD":
                    continue
                answer = client.request(method, path)
                assert (answer.status_code == 401) == row.token, (method, path, answer.text)
