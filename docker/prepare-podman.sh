#!/usr/bin/env bash
# Prepare a machine without Docker to build and run the images with podman (docs/CONTAINERS.md):
#   1. install podman, runc and debootstrap from Debian's packages if missing (apt-get, as root);
#   2. make the base image localhost/debian-base:bookworm once (debootstrap; kept afterwards).
# Idempotent: a prepared machine takes a second. Exits non-zero, with one "error:" line saying
# why, when it cannot (not root, no package mirror); callers decide whether that is fatal.
# Usage: bash docker/prepare-podman.sh
set -euo pipefail
cd "$(dirname "$0")/.."
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
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        podman runc debootstrap >/dev/null; }; then
        echo "error: apt-get could not install ${missing[*]}" >&2
        exit 1
    fi
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
