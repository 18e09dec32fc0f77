#!/usr/bin/env bash
# `make test-fresh`: the README's two set-up commands (`make demo`, `make test`) on a machine
# where nothing was installed by hand: a fresh container of the project's Debian base image
# (docker/build-image.sh makes it with podman), with a clone of this repository's HEAD in it.
# It checks that a new user's first `make test` is green: what CI cannot see, since CI runs on a
# machine where earlier work installed things.
#
# The container gets only what a new user's Debian machine has beside Python: make and git
# (installed before the clock starts), and this machine's package sources (apt's, and pip's
# index, CA bundle and find-links folder, mounted read-only, as the image build does). No
# REQUIRE_* switch is set: a test whose resource `make test` does not install must skip.
# Commit first: the clone is of HEAD. Figures go to test-artifacts/fresh.json and the log to
# test-artifacts/fresh.log.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${VIDPIPE_BASE_IMAGE:-localhost/vidpipe-base:bookworm}
say() { printf 'test-fresh: %s\n' "$*" >&2; }

bash docker/build-image.sh base  # podman and the base image, once

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-hardlinks . "$work/vidpipe"
commit=$(git -C "$work/vidpipe" rev-parse --short HEAD)
say "a fresh container of $BASE with a clone of $commit"

# pip as on this machine: its config files, CA bundle, local indexes and find-links folders
mounts=()
for path in /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /opt/pypi-more \
            /etc/ssl/certs/ca-certificates.crt /etc/apt/sources.list.d /etc/apt/sources.list \
            /etc/apt/apt.conf.d/99artifact-registry; do
  [ -e "$path" ] && mounts+=(-v "$path:$path:ro")
done
envs=()
for name in $(env | grep -o '^PIP_[A-Z_]*' || true); do envs+=(-e "$name"); done

mkdir -p test-artifacts
cat >"$work/inside.sh" <<'INSIDE'
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq make git >/dev/null
cd /root/vidpipe
started=$SECONDS; make demo; demo=$?; demo_s=$((SECONDS - started))
started=$SECONDS; make test; test=$?; test_s=$((SECONDS - started))
printf '{"make_demo": {"exit": %d, "seconds": %d}, "make_test": {"exit": %d, "seconds": %d}}\n' \
  "$demo" "$demo_s" "$test" "$test_s" >/root/figures.json
[ "$demo" -eq 0 ] && [ "$test" -eq 0 ]
INSIDE
say "running make demo and make test inside (log: test-artifacts/fresh.log)"
set +e
podman run --rm --network host --shm-size 2g "${mounts[@]}" "${envs[@]}" \
  -v "$work/vidpipe:/root/vidpipe" -v "$work/inside.sh:/root/inside.sh:ro" \
  -v "$work:/root/out" -w /root "$BASE" \
  bash -c 'bash /root/inside.sh; status=$?; cp /root/figures.json /root/out/ 2>/dev/null; exit $status' \
  >test-artifacts/fresh.log 2>&1
status=$?
set -e
summary=$(grep -E '^=+ .*(passed|failed).* =+$' test-artifacts/fresh.log | tail -n 1 || true)
figures=$(cat "$work/figures.json" 2>/dev/null || echo '{}')
printf '{"commit": "%s", "base": "%s", "exit": %d, "pytest": "%s", "commands": %s}\n' \
  "$commit" "$BASE" "$status" "${summary//\"/}" "$figures" >test-artifacts/fresh.json
cat test-artifacts/fresh.json
exit "$status"
