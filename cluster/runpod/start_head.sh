#!/usr/bin/env bash
# Starts the Ray head on this RunPod pod: GCS on the pod's private address, dashboard on 127.0.0.1 only (reach it
# with the SSH forward this script prints), token authentication on. Run it in the checkout on the head pod after
# cluster/runpod/setup_pod.sh. `--dry-run` (or DRY_RUN=1) prints the exact commands and runs none of them.
# Never run it on a shared machine: it starts Ray's processes, and this cluster's teardown is ending the pods.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
    cat <<USAGE
usage: cluster/runpod/start_head.sh [--dry-run]
Reads RUNPOD_POD_ID, RUNPOD_PUBLIC_IP, RUNPOD_TCP_PORT_22 (set by RunPod), REPLAYFORGE_BUCKET, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and RAY_AUTH_TOKEN (from the pod template), and RUNPOD_CPU_COUNT when set.
USAGE
}

parse_args "$@"
require_var RUNPOD_POD_ID "RunPod sets it in every pod; run this script on the head pod"
require_var RUNPOD_PUBLIC_IP "the dashboard is reached by an SSH forward to the head's public IP; deploy the head with a public IP"
require_var RUNPOD_TCP_PORT_22 "the SSH forward needs 22/tcp exposed; deploy the head from cluster/runpod/template.json"
require_node_env
node_ip=$(private_ip "$RUNPOD_POD_ID")

start_ray --head --node-ip-address="$node_ip" --port="$RAY_GCS_PORT" \
    --dashboard-host=127.0.0.1 --dashboard-port="$DASHBOARD_PORT"

cat <<NEXT
# head: $node_ip:$RAY_GCS_PORT (pod $RUNPOD_POD_ID). On each worker pod, in the checkout:
#   REPLAYFORGE_HEAD_POD_ID=$RUNPOD_POD_ID cluster/runpod/start_worker.sh
# On your machine, then submit with RAY_AUTH_MODE=token RAY_ADDRESS=http://127.0.0.1:$DASHBOARD_PORT:
#   ssh -N -L $DASHBOARD_PORT:127.0.0.1:$DASHBOARD_PORT -p $RUNPOD_TCP_PORT_22 root@$RUNPOD_PUBLIC_IP
NEXT
