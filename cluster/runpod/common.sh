# Shared by the scripts in this folder (sourced, not run). What they assume about a RunPod pod:
#   RUNPOD_POD_ID          set by RunPod in every pod
#   <pod id>.runpod.internal resolves to the pod's private address when the pod was deployed with Global Networking,
#                          and pods on that network reach each other on every port (Ray's GCS, raylet, object manager
#                          and worker ports are not published as RunPod TCP ports: a pod can publish only a few, and
#                          RunPod maps each to a different external port, while Ray advertises the ports it listens on)
#   RUNPOD_PUBLIC_IP, RUNPOD_TCP_PORT_22
#                          set by RunPod on a pod with a public IP and 22/tcp exposed: the head's SSH address, through
#                          which the dashboard (bound to 127.0.0.1) is forwarded
#   RUNPOD_CPU_COUNT       the vCPUs rented (optional: without it Ray reads the container's cgroup quota)
# and from the template (cluster/runpod/template.json): REPLAYFORGE_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
# and RAY_AUTH_TOKEN (the last three as RunPod secrets). Nothing here prints a secret's value.
# RunPod gives these variables to the container's first process; a login over SSH may lack some of them (RunPod's
# images copy a selection into /etc/rp_environment for logins), so one missing here is read from /proc/1/environ.

RAY_GCS_PORT=6379
DASHBOARD_PORT=8265
DRY_RUN=${DRY_RUN:-0}
POD_ENVIRON=${REPLAYFORGE_POD_ENVIRON:-/proc/1/environ}
# what Ray and the jobs it runs inherit when set: the store's place, optional keys, the vCPUs rented
OPTIONAL_VARS=(AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN HF_TOKEN
    WANDB_API_KEY RUNPOD_CPU_COUNT RAY_AUTH_MODE)

die() {
    printf '%s: %s\n' "$(basename "$0")" "$*" >&2
    exit 1
}

parse_args() {
    local arg
    for arg in "$@"; do
        case "$arg" in
            --dry-run) DRY_RUN=1 ;;
            -h | --help) usage; exit 0 ;;
            *) die "unknown argument '$arg' (only --dry-run; see --help)" ;;
        esac
    done
}

# from_pod NAME: when NAME is unset or empty here, export it from the container's first process, if that has it.
from_pod() {
    local name=$1 entry
    if [[ -n "${!name:-}" || ! -r "$POD_ENVIRON" ]]; then
        return 0
    fi
    while IFS= read -r -d '' entry; do
        if [[ "$entry" == "$name="* ]]; then
            export "$name=${entry#*=}"
            return 0
        fi
    done <"$POD_ENVIRON"
}

# require_var NAME WHY: fail naming the variable when it is unset or empty (here and in the pod's first process).
require_var() {
    local name=$1 why=$2
    from_pod "$name"
    if [[ -z "${!name:-}" ]]; then
        die "$name is not set: $why"
    fi
}

# require_secret NAME: set, and not RunPod's unresolved reference (a secret the template names but nobody created).
require_secret() {
    local name=$1
    require_var "$name" "the template passes it from a RunPod secret (docs/cluster.md, \"RunPod\"); create the secret, then redeploy the pod"
    if [[ "${!name}" == "{{"* ]]; then
        die "$name holds an unresolved RunPod secret reference: create the secret that cluster/runpod/template.json names for $name, then redeploy the pod"
    fi
}

# The node environment every pod needs: the bucket and its keys (jobs inherit them from Ray), and token auth.
require_node_env() {
    local name
    for name in "${OPTIONAL_VARS[@]}"; do
        from_pod "$name"
    done
    require_var REPLAYFORGE_BUCKET "shards and checkpoints go to s3://\$REPLAYFORGE_BUCKET; set it in the pod template"
    require_secret AWS_ACCESS_KEY_ID
    require_secret AWS_SECRET_ACCESS_KEY
    from_pod RAY_AUTH_TOKEN
    if [[ -n "${RAY_AUTH_MODE:-}" && "$RAY_AUTH_MODE" != token ]]; then
        die "RAY_AUTH_MODE=$RAY_AUTH_MODE: this cluster runs Ray with token authentication only (Ray's core servers listen on every interface of a pod); set RAY_AUTH_MODE=token or unset it"
    fi
    if [[ -z "${RAY_AUTH_TOKEN:-}" && ! -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]]; then
        die "RAY_AUTH_TOKEN is not set (nor a token file at ${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}): the template passes it from a RunPod secret holding the output of \`ray get-auth-token --generate\`"
    fi
    if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then
        require_secret RAY_AUTH_TOKEN
    fi
}

# private_ip POD_ID: the pod's address on RunPod's private network.
private_ip() {
    local host="$1.runpod.internal" ip
    ip=$(getent hosts "$host" | awk 'NR == 1 {print $1}') || true
    if [[ -z "$ip" ]]; then
        die "$host does not resolve: deploy the pods with Global Networking on, in one data center, and check the pod id"
    fi
    printf '%s\n' "$ip"
}

# A dry run still reads variables and looks up private addresses (both read-only), so the lines it prints are the
# ones a real run would run.
# run COMMAND...: print it exactly (shell-quoted, one line), then run it unless this is a dry run.
run() {
    local quoted
    quoted=$(printf ' %q' "$@")
    printf '%s\n' "${quoted# }"
    if [[ "$DRY_RUN" != 1 ]]; then
        "$@"
    fi
}

# start_ray ARG...: `ray start` with token auth set explicitly, as every node of the project's clusters runs it.
start_ray() {
    if [[ "$DRY_RUN" != 1 ]] && ! command -v ray >/dev/null; then
        die "ray is not on PATH: run cluster/runpod/setup_pod.sh in the checkout first"
    fi
    # many Parquet files and sockets open at once; a container whose hard limit is lower keeps its own
    printf 'ulimit -n 65536\n'
    if [[ "$DRY_RUN" != 1 ]]; then
        ulimit -n 65536 2>/dev/null || printf '# could not raise the open-file limit (hard limit %s)\n' "$(ulimit -Hn)"
    fi
    local cpus=()
    if [[ -n "${RUNPOD_CPU_COUNT:-}" ]]; then
        cpus=("--num-cpus=$RUNPOD_CPU_COUNT")
    fi
    run env RAY_AUTH_MODE=token ray start "$@" ${cpus[@]+"${cpus[@]}"}
}
