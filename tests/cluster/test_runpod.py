"""The RunPod path (cluster/runpod/): the pod template and the scripts that start a Ray head and workers on pods.
All offline: RunPod's pod variables are faked, `getent` answers for a fake private network, and a fake `ray` records
what it was asked to run, so no Ray starts and no pod is needed."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNPOD = REPO_ROOT / "cluster" / "runpod"
SCRIPTS = sorted(RUNPOD.glob("*.sh"))
ENTRY_SCRIPTS = ("start_head.sh", "start_worker.sh", "setup_pod.sh")
BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not on PATH: the RunPod scripts are bash scripts")

HEAD_ID, WORKER_ID = "headpod123", "workerpod456"
HEAD_IP, WORKER_IP = "10.65.0.2", "10.65.0.3"
PUBLIC_IP, SSH_PORT = "203.0.113.7", "40122"
# values that must never appear in anything a script prints
SECRETS = {"AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKEFAKE", "AWS_SECRET_ACCESS_KEY": "fake-secret-key-do-not-print",
           "RAY_AUTH_TOKEN": "fake-ray-token-0123456789abcdef"}
SECRET_REF = re.compile(r"^\{\{ RUNPOD_SECRET_\w+ \}\}$")


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    """A PATH folder with RunPod's private network (`getent hosts`) and a `ray` that records its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "getent").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = hosts ] || exit 1\n'
        f'case "$2" in\n'
        f"  {HEAD_ID}.runpod.internal) echo '{HEAD_IP}       {HEAD_ID}.runpod.internal' ;;\n"
        f"  {WORKER_ID}.runpod.internal) echo '{WORKER_IP}       {WORKER_ID}.runpod.internal' ;;\n"
        "  *) exit 2 ;;\n"
        "esac\n")
    calls = tmp_path / "ray_calls"
    (bin_dir / "ray").write_text(f'#!/bin/sh\necho "RAY_AUTH_MODE=$RAY_AUTH_MODE $*" >> {calls}\n'
                                 f'env > {tmp_path / "ray_env"}\n')
    for tool in ("python3", "npm", "apt-get"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path / "other_calls"}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def pod_env(bin_dir: Path, pod_id: str, **extra: str) -> dict[str, str]:
    """A pod's environment as the template and RunPod give it (HOME empty: no ~/.ray/auth_token to fall back on)."""
    home = bin_dir.parent / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "RUNPOD_POD_ID": pod_id,
           "REPLAYFORGE_POD_ENVIRON": str(bin_dir.parent / "no_pod_environ"),  # never this machine's /proc/1
           "REPLAYFORGE_BUCKET": "replayforge-test", "RAY_AUTH_MODE": "token", **SECRETS}
    if pod_id == HEAD_ID:
        env.update(RUNPOD_PUBLIC_IP=PUBLIC_IP, RUNPOD_TCP_PORT_22=SSH_PORT)
    else:
        env["REPLAYFORGE_HEAD_POD_ID"] = HEAD_ID
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run_script(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(RUNPOD / name), *args], env=env, capture_output=True, text=True, timeout=30)


def commands(stdout: str) -> list[list[str]]:
    """The commands a script printed (comment lines dropped), split as the shell would."""
    return [shlex.split(line) for line in stdout.splitlines() if line and not line.startswith("#")]


def assert_nothing_secret(result: subprocess.CompletedProcess) -> None:
    for name, value in SECRETS.items():
        assert value not in result.stdout + result.stderr, f"{name}'s value was printed"
    assert "RAY_AUTH_MODE=disabled" not in result.stdout


@needs_bash
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse_and_fail_early(script):
    subprocess.run([BASH, "-n", str(script)], check=True, timeout=30)
    if script.name in ENTRY_SCRIPTS:
        lines = script.read_text().splitlines()
        assert lines[0] == "#!/usr/bin/env bash"
        assert "set -euo pipefail" in lines
        assert script.stat().st_mode & 0o111, f"{script.name} is not executable"


def test_every_script_is_known():
    assert sorted(p.name for p in SCRIPTS) == sorted((*ENTRY_SCRIPTS, "common.sh"))


@needs_bash
@pytest.mark.parametrize("dry_run", [("--dry-run",), ("DRY_RUN=1",)], ids=["flag", "env"])
def test_head_dry_run_prints_the_exact_commands_and_runs_none(fake_bin, dry_run):
    env = pod_env(fake_bin, HEAD_ID)
    args: tuple[str, ...] = dry_run
    if dry_run == ("DRY_RUN=1",):
        env["DRY_RUN"], args = "1", ()
    result = run_script("start_head.sh", env, *args)
    assert result.returncode == 0, result.stderr
    assert commands(result.stdout) == [
        ["ulimit", "-n", "65536"],
        ["env", "RAY_AUTH_MODE=token", "ray", "start", "--head", f"--node-ip-address={HEAD_IP}", "--port=6379",
         "--dashboard-host=127.0.0.1", "--dashboard-port=8265"],
    ]
    assert f"#   REPLAYFORGE_HEAD_POD_ID={HEAD_ID} cluster/runpod/start_worker.sh" in result.stdout
    assert f"#   ssh -N -L 8265:127.0.0.1:8265 -p {SSH_PORT} root@{PUBLIC_IP}" in result.stdout
    assert_nothing_secret(result)
    assert not (fake_bin.parent / "ray_calls").exists()


@needs_bash
def test_worker_joins_the_address_the_head_printed(fake_bin):
    head = run_script("start_head.sh", pod_env(fake_bin, HEAD_ID), "--dry-run")
    head_start = commands(head.stdout)[1]
    head_port = next(a.split("=")[1] for a in head_start if a.startswith("--port="))
    # the worker line the head printed, run on a worker pod
    worker_line = next(line for line in head.stdout.splitlines() if "start_worker.sh" in line)
    assignment = shlex.split(worker_line.lstrip("# "))[0]
    name, head_id = assignment.split("=")
    result = run_script("start_worker.sh", pod_env(fake_bin, WORKER_ID, **{name: head_id}), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert commands(result.stdout) == [
        ["ulimit", "-n", "65536"],
        ["env", "RAY_AUTH_MODE=token", "ray", "start", f"--address={HEAD_IP}:{head_port}",
         f"--node-ip-address={WORKER_IP}"],
    ]
    assert_nothing_secret(result)
    assert not (fake_bin.parent / "ray_calls").exists()


@needs_bash
@pytest.mark.parametrize("script,pod_id", [("start_head.sh", HEAD_ID), ("start_worker.sh", WORKER_ID)])
def test_a_real_run_starts_ray_with_the_printed_arguments_and_token_auth(fake_bin, script, pod_id):
    """Without --dry-run the same command runs (here the fake `ray`), with RAY_AUTH_MODE=token in its environment,
    and RUNPOD_CPU_COUNT becomes --num-cpus."""
    result = run_script(script, pod_env(fake_bin, pod_id, RUNPOD_CPU_COUNT="16"))
    assert result.returncode == 0, result.stderr
    printed = commands(result.stdout)[1]
    assert printed[-1] == "--num-cpus=16"
    calls = (fake_bin.parent / "ray_calls").read_text().splitlines()
    assert calls == ["RAY_AUTH_MODE=token " + " ".join(printed[3:])]
    assert_nothing_secret(result)


HEAD_REQUIRED = ("RUNPOD_POD_ID", "RUNPOD_PUBLIC_IP", "RUNPOD_TCP_PORT_22", "REPLAYFORGE_BUCKET", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "RAY_AUTH_TOKEN")
WORKER_REQUIRED = ("REPLAYFORGE_HEAD_POD_ID", "RUNPOD_POD_ID", "REPLAYFORGE_BUCKET", "AWS_ACCESS_KEY_ID",
                   "AWS_SECRET_ACCESS_KEY", "RAY_AUTH_TOKEN")


@needs_bash
@pytest.mark.parametrize("script,pod_id,missing",
                         [("start_head.sh", HEAD_ID, v) for v in HEAD_REQUIRED]
                         + [("start_worker.sh", WORKER_ID, v) for v in WORKER_REQUIRED])
@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_a_missing_variable_is_named_and_nothing_starts(fake_bin, script, pod_id, missing, value):
    env = pod_env(fake_bin, pod_id)
    env.pop(missing)
    if value is not None:
        env[missing] = value
    result = run_script(script, env)
    assert result.returncode != 0
    assert f"{missing} is not set" in result.stderr, result.stderr
    assert not (fake_bin.parent / "ray_calls").exists()
    assert_nothing_secret(result)


@needs_bash
@pytest.mark.parametrize("script,pod_id", [("start_head.sh", HEAD_ID), ("start_worker.sh", WORKER_ID)])
@pytest.mark.parametrize("change,expected", [
    ({"RAY_AUTH_MODE": "disabled"}, "RAY_AUTH_MODE=disabled: this cluster runs Ray with token authentication only"),
    ({"RAY_AUTH_TOKEN": "{{ RUNPOD_SECRET_replayforge_ray_auth_token }}"},
     "RAY_AUTH_TOKEN holds an unresolved RunPod secret reference"),
    ({"AWS_SECRET_ACCESS_KEY": "{{ RUNPOD_SECRET_x }}"}, "AWS_SECRET_ACCESS_KEY holds an unresolved RunPod secret"),
    ({"RUNPOD_POD_ID": "notonthenetwork"}, "notonthenetwork.runpod.internal does not resolve: deploy the pods with "
                                           "Global Networking on"),
], ids=["auth-disabled", "unresolved-token", "unresolved-key", "no-private-network"])
def test_refusals_say_what_to_fix(fake_bin, script, pod_id, change, expected):
    env = pod_env(fake_bin, pod_id, **change)
    if script == "start_worker.sh" and "RUNPOD_POD_ID" in change:
        env["REPLAYFORGE_HEAD_POD_ID"] = HEAD_ID
    result = run_script(script, env, "--dry-run")
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert "ray start" not in result.stdout


@needs_bash
def test_variables_an_ssh_login_lacks_come_from_the_pods_first_process(fake_bin):
    """An SSH login may lack the template's variables; the scripts take them from the container's first process
    (/proc/1/environ, here a fake one) and Ray inherits them, so jobs reach the bucket."""
    full = pod_env(fake_bin, HEAD_ID, AWS_REGION="us-west-2", RUNPOD_CPU_COUNT="8")
    environ = fake_bin.parent / "pod_environ"
    environ.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in full.items() if k not in ("PATH", "HOME")))
    login = {"PATH": full["PATH"], "HOME": full["HOME"], "REPLAYFORGE_POD_ENVIRON": str(environ)}
    result = run_script("start_head.sh", login)
    assert result.returncode == 0, result.stderr
    assert commands(result.stdout)[1][4:] == ["--head", f"--node-ip-address={HEAD_IP}", "--port=6379",
                                              "--dashboard-host=127.0.0.1", "--dashboard-port=8265", "--num-cpus=8"]
    ray_env = dict(line.split("=", 1) for line in (fake_bin.parent / "ray_env").read_text().splitlines() if "=" in line)
    for name in ("REPLAYFORGE_BUCKET", "AWS_REGION", *SECRETS):
        assert ray_env.get(name) == full[name], name
    assert_nothing_secret(result)


@needs_bash
def test_a_token_file_stands_in_for_the_variable(fake_bin):
    env = pod_env(fake_bin, HEAD_ID, RAY_AUTH_TOKEN=None)
    token = Path(env["HOME"]) / ".ray" / "auth_token"
    token.parent.mkdir()
    token.write_text("from-a-file")
    result = run_script("start_head.sh", env, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "from-a-file" not in result.stdout + result.stderr


@needs_bash
def test_the_worker_refuses_the_heads_own_pod(fake_bin):
    result = run_script("start_worker.sh", pod_env(fake_bin, HEAD_ID, REPLAYFORGE_HEAD_POD_ID=HEAD_ID), "--dry-run")
    assert result.returncode != 0
    assert "REPLAYFORGE_HEAD_POD_ID is this pod's own id" in result.stderr


@needs_bash
def test_setup_dry_run_prints_the_install_and_runs_nothing(fake_bin):
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(fake_bin.parent)}
    result = run_script("setup_pod.sh", env, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert commands(result.stdout) == [
        ["python3", "-m", "pip", "install", "--quiet", "-e", ".[dev]"],
        ["npm", "ci", "--omit=optional", "--no-audit", "--no-fund", "--loglevel=error"],
    ]
    assert not (fake_bin.parent / "other_calls").exists()
    # the same steps as ray_cluster.yaml's setup_commands on AWS
    cluster_yaml = (REPO_ROOT / "ray_cluster.yaml").read_text()
    assert 'pip install --quiet -e ".[dev]"' in cluster_yaml
    assert "npm ci --omit=optional --no-audit --no-fund --loglevel=error" in cluster_yaml


@needs_bash
@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_unknown_arguments_are_refused(script):
    result = subprocess.run([BASH, str(RUNPOD / script), "--dryrun"], capture_output=True, text=True, timeout=30,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode != 0
    assert "unknown argument '--dryrun'" in result.stderr


def _template() -> dict:
    return json.loads((RUNPOD / "template.json").read_text())


def test_template_has_the_fields_a_pod_needs():
    template = _template()
    for field, kind in {"name": str, "imageName": str, "containerDiskInGb": int, "volumeInGb": int,
                        "volumeMountPath": str, "ports": list, "env": dict}.items():
        assert isinstance(template.get(field), kind), f"template.json: {field} missing or not a {kind.__name__}"
    image, _, tag = template["imageName"].rpartition(":")
    assert image and tag and tag != "latest", "pin the image tag, so every pod of a cluster runs the same image"
    assert template["containerDiskInGb"] > 0
    # SSH only: Ray's ports stay on the private network and the dashboard behind the SSH forward
    assert template["ports"] == ["22/tcp"]
    assert template["env"]["RAY_AUTH_MODE"] == "token"


def test_template_holds_no_secret_values():
    """Keys and the Ray token come from RunPod secrets, referenced by name; the file holds no values."""
    template = _template()
    env = template["env"]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "RAY_AUTH_TOKEN"):
        assert SECRET_REF.match(env[name]), f"{name} must be a {{{{ RUNPOD_SECRET_... }}}} reference, not a value"
    for name, value in env.items():
        if re.search(r"KEY|TOKEN|SECRET|PASSWORD", name):
            assert SECRET_REF.match(value), f"{name} looks secret: pass it as a RunPod secret"
    text = (RUNPOD / "template.json").read_text()
    assert not re.search(r"AKIA[0-9A-Z]{16}|[0-9a-f]{32}", text)
    assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", env["REPLAYFORGE_BUCKET"])


def test_template_gives_every_variable_the_scripts_require():
    """Every variable the scripts require comes from RunPod itself (RUNPOD_*), from the template, or, for the
    worker, from the line start_head.sh prints (REPLAYFORGE_HEAD_POD_ID)."""
    text = "\n".join(p.read_text() for p in SCRIPTS)
    required = set(re.findall(r"(?m)^\s*require_(?:var|secret) ([A-Z_0-9]+)", text))
    assert {"RUNPOD_POD_ID", "REPLAYFORGE_BUCKET", "AWS_SECRET_ACCESS_KEY"} <= required
    from_template = set(_template()["env"])
    missing = {v for v in required if not v.startswith("RUNPOD_") and v != "REPLAYFORGE_HEAD_POD_ID"} - from_template
    assert not missing, f"the scripts require {sorted(missing)}, which template.json does not set"
    assert "RAY_AUTH_TOKEN" in from_template


def _submitted_jobs(section: str) -> list[list[str]]:
    """The `python SCRIPT ARGS` that a docs section's `ray job submit ... sh -c '...'` lines run."""
    joined = section.replace("\\\n", " ")
    return [shlex.split(job) for job in re.findall(r"ray job submit .*?sh -c '(python [^']*)'", joined)]


def test_the_cluster_page_walks_through_both_clusters():
    """Both walk-throughs exist, name the files that exist, and submit the project's real commands: each job's
    flags parse with its entry point's own CLI (a renamed or removed flag fails here)."""
    from pipelines.cli import parser_for
    from pipelines.parse_replays import ParseConfig
    from training.melee.world_model import WorldModelTrainConfig

    readme = (REPO_ROOT / "docs" / "cluster.md").read_text()
    aws = readme[readme.index("### AWS: launch"):readme.index("### RunPod: launch")]
    runpod = readme[readme.index("### RunPod: launch"):readme.index("### On either cluster")]
    for step in ("ray up ray_cluster.yaml", "ray dashboard ray_cluster.yaml", "ray down ray_cluster.yaml"):
        assert step in aws, step
    for step in ("cluster/runpod/template.json", "cluster/runpod/setup_pod.sh", "cluster/runpod/start_head.sh",
                 "REPLAYFORGE_HEAD_POD_ID=<head pod id> cluster/runpod/start_worker.sh",
                 "ssh -N -L 8265:127.0.0.1:8265", "Global Networking", "terminate"):
        assert step in runpod, step
    for path in re.findall(r"cluster/runpod/[\w.]+", readme):
        assert (REPO_ROOT / path).exists(), path
    configs = {"pipelines/parse_replays.py": ParseConfig, "training/melee/world_model.py": WorldModelTrainConfig}
    for section in (aws, runpod):
        assert "RAY_AUTH_MODE=token RAY_ADDRESS=http://127.0.0.1:8265" in section
        assert "RAY_AUTH_MODE=disabled" not in section
        jobs = _submitted_jobs(section)
        assert {job[1] for job in jobs} == set(configs), jobs
        for job in jobs:
            try:
                parser_for(configs[job[1]]).parse_args(job[2:])
            except SystemExit:
                pytest.fail(f"docs/cluster.md submits {job[1]} with flags it does not take: {job[2:]}")
            outputs = [job[i + 1] for i, a in enumerate(job) if a in ("--out", "--shards", "--input")]
            assert outputs and all(o.startswith("s3://$REPLAYFORGE_BUCKET/") for o in outputs), job
