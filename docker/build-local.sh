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

"$WHATIF" images build --engine podman --base "$BASE" "$@"
# Each build leaves its untagged build stage behind (about 1.5 GB an image): remove them. The
# images keep their own layers; an unchanged image's next build runs its pip step again.
podman image prune --force >/dev/null
"$WHATIF" images check --engine podman "$@"
