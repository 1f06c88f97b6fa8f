#!/usr/bin/env bash
# Build and check every image with podman on a machine that reaches Debian's package mirror and
# the Python package index but no image registry (docs/CONTAINERS.md):
#   1. install podman, runc and debootstrap from Debian's packages if missing (apt-get, as root);
#   2. make the base image localhost/debian-base:bookworm once (debootstrap; kept afterwards);
#   3. `whatif images build` every image over that base, passing the host's pip settings;
#   4. `whatif images check`: `whatif --version` and a short simulation in each image, whose
#      content hash must equal the host run's.
# Usage: bash docker/build-local.sh [WHATIF [ARGS...]]   (WHATIF: the `whatif` to use, default
# .venv/bin/whatif; ARGS go to both `images build` and `images check`, e.g. --simulator sumo)
set -euo pipefail
cd "$(dirname "$0")/.."
WHATIF=${1:-.venv/bin/whatif}
shift || true
BASE=localhost/debian-base:bookworm
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/docker/podman-runc.conf}

missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: install ${missing[*]} (apt-get install -y podman runc debootstrap, as root)" >&2
        exit 1
    fi
    echo "installing ${missing[*]} from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
fi

if ! podman image exists "$BASE"; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: making $BASE needs root (debootstrap)" >&2
        exit 1
    fi
    root=$(mktemp -d /tmp/whatif-debian-base.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    echo "making $BASE with debootstrap (a few minutes, once)" >&2
    started=$SECONDS
    if ! debootstrap --variant=minbase bookworm "$root" >"$root.log" 2>&1; then
        echo "error: base image $BASE: debootstrap failed (log: $root.log)" >&2
        exit 1
    fi
    # apt's downloaded packages, documentation and translations: not needed in an image
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
        "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
        "$root"/usr/share/locale/*
    tar -C "$root" -c . | podman import --quiet - "$BASE" >/dev/null
    rm -f "$root.log"
    echo "made $BASE in $((SECONDS - started)) s" >&2
fi

"$WHATIF" images build --engine podman --base "$BASE" "$@"
# Each build leaves its untagged build stage behind (about 1.5 GB an image): remove them. The
# images keep their own layers; an unchanged image's next build runs its pip step again.
podman image prune --force >/dev/null
"$WHATIF" images check --engine podman "$@"
