"""ray_cluster.yaml is a cluster config Ray accepts: its own JSON schema, and the project's rules for heads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return yaml.safe_load((REPO_ROOT / "ray_cluster.yaml").read_text())


def test_cluster_config_follows_rays_schema():
    import jsonschema
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    config = _config()
    jsonschema.validate(config, schema)
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert sum(t["max_workers"] for t in workers) <= config["max_workers"]


def test_ray_is_started_as_the_project_requires():
    config = _config()
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    for command in starts:
        assert "RAY_AUTH_MODE=" in command, command  # set explicitly, never left to the default
    head = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head  # reached through `ray dashboard` (SSH), never opened publicly
    assert all(t["node_config"]["ImageId"] for t in config["available_node_types"].values())


def test_shards_and_checkpoints_live_on_s3_reached_by_instance_profile():
    """A cluster's nodes share no disk: a local --out (``/mnt/shards``, nothing mounts it) would leave each node's
    shards on that node. Every output the file shows goes to the one bucket variable, and every node reaches it
    with an instance profile, never with keys in the file."""
    text = (REPO_ROOT / "ray_cluster.yaml").read_text()
    config = _config()
    outputs = re.findall(r"--(out|shards)\s+(\S+)", text)
    assert {flag for flag, _ in outputs} == {"out", "shards"}, outputs
    assert all(uri.startswith("s3://$REPLAYFORGE_BUCKET/") for _, uri in outputs), outputs
    assert "/mnt/" not in text
    exports = [c for c in config["setup_commands"] if "export REPLAYFORGE_BUCKET=" in c]
    assert len(exports) == 1 and len(re.findall(r"REPLAYFORGE_BUCKET=\w", text)) == 1, exports
    for name, node_type in config["available_node_types"].items():
        assert node_type["node_config"].get("IamInstanceProfile"), f"{name} has no instance profile"
    assert not re.search(r"AWS_(ACCESS_KEY_ID|SECRET_ACCESS_KEY|SESSION_TOKEN)|aws_access_key|AKIA[0-9A-Z]{16}", text)
