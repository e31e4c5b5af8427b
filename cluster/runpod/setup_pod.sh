#!/usr/bin/env bash
# Installs the project on a RunPod pod, as ray_cluster.yaml's setup_commands do on AWS: the Python package with its
# dev extra into the image's Python (its CUDA torch satisfies pyproject's pin, so pip keeps it), and the pinned
# Pokémon Showdown simulator. Run it as root in the checkout (/workspace/replayforge) on every pod, head and workers.
# `--dry-run` (or DRY_RUN=1) prints the exact commands and runs none of them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
    printf 'usage: cluster/runpod/setup_pod.sh [--dry-run]  (in the checkout on the pod)\n'
}

parse_args "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[[ -f pyproject.toml ]] || die "no pyproject.toml in $(pwd): copy the whole checkout to the pod (docs/cluster.md, \"RunPod\")"

run python3 -m pip install --quiet -e ".[dev]"
if ! command -v npm >/dev/null; then
    run apt-get update -qq
    run apt-get install -y -qq nodejs npm
fi
run npm ci --omit=optional --no-audit --no-fund --loglevel=error
