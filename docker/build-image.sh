#!/usr/bin/env bash
# Builds the CPU image (vidpipe:cpu) with podman where no image registry can be reached: a CI
# runner or a lab server with Debian's apt. `make image` runs it; it is idempotent, and a second
# run rebuilds only what changed. Users with a registry build docker/Dockerfile.cpu as it is.
#
# What it does, each step skipped when already done:
#   1. installs podman, buildah, mmdebstrap and runc with apt (as root);
#   2. sets the container engine up for machines like CI's: runc (crun cannot set limits on a
#      mixed cgroup hierarchy) and explicit nofile/nproc limits (higher ones fail there);
#   3. makes the base image from a Debian rootfs (mmdebstrap, with this machine's apt sources):
#      python3 3.11, python3-venv, ca-certificates; tagged localhost/vidpipe-base:bookworm;
#   4. builds docker/Dockerfile.cpu on it, with pip reaching the package index this machine
#      uses (its CA bundle mounted into the build, for proxies that re-sign TLS) and torch's
#      CPU wheel taken from pip's find-links folder when it holds one (its dependencies from
#      the index).
#
# Arguments: the images to build, `cpu` (the default) and `prometheus` (Prometheus from Debian's
# package, which the compose stack uses in place of prom/prometheus: PROMETHEUS_IMAGE); `base`
# alone makes steps 1-3 only (docker/test-fresh.sh runs the README's commands on it).
# Environment: VIDPIPE_IMAGE (tag, default vidpipe:cpu), VIDPIPE_BASE_IMAGE (default
# localhost/vidpipe-base:bookworm), DEBIAN_SOURCES (apt sources file for the rootfs), EXTRAS
# (pip extras, e.g. "[ray]").
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${VIDPIPE_IMAGE:-vidpipe:cpu}
BASE=${VIDPIPE_BASE_IMAGE:-localhost/vidpipe-base:bookworm}
EXTRAS=${EXTRAS:-}
say() { printf 'build-image: %s\n' "$*" >&2; }

# 1. the tools
missing=$(for p in podman buildah mmdebstrap runc; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  say "installing $(echo $missing)"
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null
fi

# 2. the engine's settings (a drop-in, so the distribution's containers.conf stays as it is)
conf=/etc/containers/containers.conf.d/vidpipe.conf
wanted='[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"'
if [ "$(cat "$conf" 2>/dev/null)" != "$wanted" ]; then
  say "writing $conf"
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$wanted" >"$conf"
fi

# 3. the base image
if ! podman image exists "$BASE"; then
  sources=${DEBIAN_SOURCES:-}
  if [ -z "$sources" ]; then
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
      if [ -s "$f" ]; then sources=$f; break; fi
    done
  fi
  [ -n "$sources" ] || { say "no apt sources file found: set DEBIAN_SOURCES"; exit 2; }
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  say "making $BASE from a Debian bookworm rootfs ($sources)"
  started=$SECONDS
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs/rootfs.tar" "$sources"
  podman import --quiet --change 'CMD ["python3"]' "$rootfs/rootfs.tar" "$BASE" >/dev/null
  say "base image made in $((SECONDS - started)) s"
fi

case " ${*:-cpu} " in *" prometheus "*)
  say "building localhost/vidpipe-prometheus (Debian's prometheus, for the compose stack)"
  podman build --quiet --format docker --layers --build-arg "BASE_IMAGE=$BASE" \
    -f docker/prometheus/Dockerfile.debian -t localhost/vidpipe-prometheus docker/prometheus >/dev/null
esac
case " ${*:-cpu} " in *" cpu "*) ;; *) exit 0 ;; esac

# 4. the image. pip inside the build reads a pip.conf made here: the CA bundle pip uses on this
# machine (mounted at the same path) and nothing else of this machine's pip settings.
build=$(mktemp -d)
trap 'rm -rf "$build" ${rootfs:-}' EXIT
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
[ -n "$cert" ] || cert=$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile or "")')
args=(--format docker --layers -f docker/Dockerfile.cpu -t "$IMAGE"
      --build-arg "PYTHON_IMAGE=$BASE" --build-arg "EXTRAS=$EXTRAS")
if [ -n "$cert" ] && [ -f "$cert" ]; then
  printf '[global]\ncert = /etc/ssl/certs/vidpipe-build-ca.crt\n' >"$build/pip.conf"
  args+=(-v "$cert:/etc/ssl/certs/vidpipe-build-ca.crt:ro" -v "$build/pip.conf:/etc/pip.conf:ro")
fi
for dir in $(python3 -m pip config get global.find-links 2>/dev/null || true); do
  if compgen -G "$dir/torch-2.13.0+cpu-*.whl" >/dev/null; then
    say "torch's CPU wheel from $dir"
    args+=(-v "$dir:/wheels:ro" --build-arg "TORCH_FROM=--find-links /wheels")
    break
  fi
done
say "building $IMAGE"
started=$SECONDS
podman build "${args[@]}" .
say "built $IMAGE in $((SECONDS - started)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE" \
  | awk '{printf "%.0f MB", $1 / 1e6}')"
