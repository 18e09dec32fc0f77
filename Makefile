# The two set-up commands of the README. Both are idempotent: a second run reinstalls nothing
# unless pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DIR ?= build/demo
# Debian packages the tests need: GStreamer's RTSP server (run with /usr/bin/python3, since gi
# does not import in a venv), Chromium for the dashboard's browser test (and libatomic1 for
# Playwright's Node.js driver, which a fresh Debian lacks: make test-fresh found it), Prometheus
# (with promtool) for the observability tests, and mosquitto, the MQTT broker of the event tests.
APT_PACKAGES := python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly chromium libatomic1 prometheus mosquitto

.PHONY: demo test test-fast test-fresh test-container test-openvino image lint clean gpu-api

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# trackers without its dependencies: it asks for opencv-python, vidpipe has the headless build
# (pipelines/analytics/tracking.py); its other dependencies are in pyproject.toml.
TRACKERS := trackers==2.6.1

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps $(TRACKERS)
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.runtime
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/vidpipe demo --out $(DEMO_DIR)

test: $(VENV)/.test
	@if [ -n "$(strip $(APT_PACKAGES))" ]; then \
	  missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing; fi; \
	fi
	$(BIN)/pytest -m "not container"

# The inner loop: everything but the tests marked slow (a real Ray cluster, Schemathesis, the
# browser, broker outages, training) and the container ones; installs nothing with apt (the
# tests whose Debian packages are missing skip). `make test` still runs everything.
test-fast: $(VENV)/.test
	$(BIN)/pytest -m "not slow and not container"

# The README's two commands in a fresh container of the project's Debian base image, on a
# clone of HEAD: what a new user's first `make test` meets (docker/test-fresh.sh).
test-fresh:
	bash docker/test-fresh.sh

# OpenVINO, the optional second CPU runtime (vidpipe[openvino]), installed into the venv and
# its tests run (the rest of the suite runs without it: make test).
test-openvino: $(VENV)/.test
	$(BIN)/pip install --quiet -e '.[openvino]'
	$(BIN)/pytest -m openvino

# The CPU image, built with podman where no registry is reachable (docker/build-image.sh says
# how), and the Prometheus image the compose stack's test uses.
image:
	bash docker/build-image.sh cpu prometheus

# The container tests: the image run as users run it, and the compose stack (CI's own step).
test-container: $(VENV)/.test image
	$(BIN)/pytest -m container

# The real GPU wheels' API (about 200 MB, downloaded once into build/gpu-api) read over
# stand-in driver libraries into tests/gpu_api/manifest.json, and the GPU code checked
# against it; `make test` checks the code against the committed manifest.
gpu-api: $(VENV)/.test
	$(BIN)/python -m tests.gpu_api.full_check

lint: $(VENV)/.test
	$(BIN)/ruff check app pipelines models tests
	$(BIN)/mypy app pipelines models

clean:
	rm -rf $(VENV) build *.egg-info
