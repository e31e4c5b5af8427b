#!/usr/bin/env bash
# Joins this RunPod pod to the head started by start_head.sh, over RunPod's private network, with token
# authentication on. Run it in the checkout on each worker pod after cluster/runpod/setup_pod.sh, with the head's
# pod id: `REPLAYFORGE_HEAD_POD_ID=<head pod id> cluster/runpod/start_worker.sh`. `--dry-run` (or DRY_RUN=1) prints
# the exact commands and runs none of them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
    cat <<USAGE
usage: REPLAYFORGE_HEAD_POD_ID=<head pod id> cluster/runpod/start_worker.sh [--dry-run]
Reads REPLAYFORGE_HEAD_POD_ID (the head's RUNPOD_POD_ID, printed by start_head.sh), RUNPOD_POD_ID (set by RunPod),
REPLAYFORGE_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and RAY_AUTH_TOKEN (from the pod template), and
RUNPOD_CPU_COUNT when set.
USAGE
}

parse_args "$@"
require_var REPLAYFORGE_HEAD_POD_ID "give the head's pod id (start_head.sh prints the line to run)"
require_var RUNPOD_POD_ID "RunPod sets it in every pod; run this script on a worker pod"
if [[ "$REPLAYFORGE_HEAD_POD_ID" == "$RUNPOD_POD_ID" ]]; then
    die "REPLAYFORGE_HEAD_POD_ID is this pod's own id: this is the head; run start_worker.sh on the other pods"
fi
require_node_env
head_ip=$(private_ip "$REPLAYFORGE_HEAD_POD_ID")
node_ip=$(private_ip "$RUNPOD_POD_ID")

start_ray --address="$head_ip:$RAY_GCS_PORT" --node-ip-address="$node_ip"
