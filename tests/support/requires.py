"""What a test needs beyond what ``make test`` installs, in one place.

A test that needs a resource the machine may lack (a GPU, GStreamer's RTSP server, mosquitto,
Chromium, Prometheus, Ray, OpenVINO, podman) calls ``unavailable(resource, reason)`` when it
is missing: the test skips with the reason, so a new user's first ``make test`` is green, and
it fails instead where ``REQUIRE_<RESOURCE>=1`` is set (CI sets every switch: nothing it
should run is skipped there in silence).
"""

from __future__ import annotations

import importlib.util
import os
from typing import NoReturn

import pytest

RESOURCES = ("gpu", "rtsp", "mqtt", "browser", "prometheus", "ray", "openvino", "container")


def switch(resource: str) -> str:
    """The environment variable that makes ``resource`` required: REQUIRE_<RESOURCE>."""
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}; expected one of {RESOURCES}")
    return f"REQUIRE_{resource.upper()}"


def required(resource: str) -> bool:
    """Whether this run must have ``resource`` (its switch is set to 1)."""
    return os.environ.get(switch(resource)) == "1"


def unavailable(resource: str, reason: str) -> NoReturn:
    """``resource`` is missing, for ``reason``: fail when it is required, else skip."""
    name = switch(resource)
    if required(resource):
        pytest.fail(f"{name}=1 but {reason}")
    pytest.skip(f"{reason} ({name}=1 fails instead)")


def require_module(resource: str, module: str, install: str) -> None:
    """Skip (or fail, see ``unavailable``) unless the Python module ``module`` is installed;
    ``install`` says how to get it."""
    if importlib.util.find_spec(module) is None:
        unavailable(resource, f"{module} is not installed ({install})")
