#!/usr/bin/env bash
# Build and check every image with podman on a machine that reaches Debian's package mirror and
# the Python package index but no image registry (docs/CONTAINERS.md):
#   1-2. docker/prepare-podman.sh: podman, runc and debootstrap installed, the local Debian base
#        localhost/debian-base:bookworm made once;
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

bash docker/prepare-podman.sh

# (each build removes the untagged images it left, its stages and the image it replaced, which
# carry the toolkit's label; simulators/containers.py)
"$WHATIF" images build --engine podman --base "$BASE" "$@"
"$WHATIF" images check --engine podman "$@"
